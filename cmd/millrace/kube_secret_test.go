package main

import (
	"path"
	"strings"
	"testing"

	"github.com/ankka-flow/millrace/sidecar"
)

// TestKubernetesSecret: the example's Kafka credentials come from the Secret as files the
// sidecar reads (ConfigFromEnv accepts them through the mount), only the sidecar mounts it,
// readable by the pod's group, and no secret is a plain environment value.
func TestKubernetesSecret(t *testing.T) {
	m := readManifests(t, manifestsDir)
	sc, br := m.containerNamed(t, "sidecar"), m.containerNamed(t, "bridge")
	env := m.containerEnv(t, sc)
	cfg, err := sidecar.ConfigFromEnv(newRecorder(env).getenv, m.containerFiles(t, sc))
	if err != nil {
		t.Fatalf("ConfigFromEnv(the sidecar container) = %v; want no problem", err)
	}
	if cfg.TLS == nil || cfg.TLS.RootCAs == nil || cfg.SASL == nil {
		t.Errorf("the sidecar's connection: TLS %v, SASL %v; want TLS with the Secret's CA and SASL", cfg.TLS, cfg.SASL)
	}
	for _, name := range []string{"FLOW_KAFKA_SASL_PASSWORD_FILE", "FLOW_KAFKA_TLS_CA_FILE"} {
		file := env[name]
		vm, v := m.mountFor(sc, path.Dir(file))
		if vm == nil || v == nil || v.Secret == nil || !vm.ReadOnly {
			t.Errorf("%s=%s is not in a read-only mount of the Secret", name, file)
			continue
		}
		if _, ok := m["Secret"].StringData[strings.TrimPrefix(file, vm.MountPath+"/")]; !ok {
			t.Errorf("%s=%s names no key of Secret %s", name, file, m["Secret"].Metadata.Name)
		}
		if mode := v.Secret.DefaultMode; mode == nil || *mode&0o040 == 0 || *mode&0o007 != 0 {
			t.Errorf("the Secret's volume mode %v; want it readable by the group and not by others", mode)
		}
	}
	pod := &m["Deployment"].Spec.Template.Spec
	if pod.SecurityContext == nil || pod.SecurityContext.FSGroup == nil || pod.SecurityContext.RunAsGroup == nil || *pod.SecurityContext.FSGroup != *pod.SecurityContext.RunAsGroup {
		t.Error("the pod has no fsGroup equal to its runAsGroup; its user could not read the Secret's files")
	}
	for _, vm := range br.VolumeMounts {
		if v := m.volume(vm.Name); v != nil && v.Secret != nil {
			t.Errorf("the bridge mounts the Kafka Secret (%s); only the sidecar talks to Kafka", vm.Name)
		}
	}
	for _, name := range []string{"FLOW_KAFKA_SASL_PASSWORD"} {
		if _, ok := env[name]; ok {
			t.Errorf("the sidecar's environment sets %s; give it as a file from the Secret", name)
		}
	}
}
