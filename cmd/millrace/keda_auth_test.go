package main

import (
	"path/filepath"
	"testing"

	"github.com/ankka-flow/millrace/sidecar"
)

const kedaAuthFile = repoRoot + "/deploy/keda/triggerauthentication-kafka.yaml"

// TestKedaKafkaAuthentication checks that KEDA's Kafka scaler connects as the sidecar does:
// its trigger's sasl and tls are the sidecar's FLOW_KAFKA_* settings, and its
// TriggerAuthentication takes the password and the CA from the very Secret keys the sidecar
// mounts as FLOW_KAFKA_SASL_PASSWORD_FILE and FLOW_KAFKA_TLS_CA_FILE, and the user from the
// sidecar's FLOW_KAFKA_SASL_USERNAME.
func TestKedaKafkaAuthentication(t *testing.T) {
	m := readManifests(t, manifestsDir)
	dep, sec := m["Deployment"], m["Secret"]
	sc := m.containerNamed(t, "sidecar")
	env := m.containerEnv(t, sc)
	cfg, err := sidecar.ConfigFromEnv(newRecorder(env).getenv, m.containerFiles(t, sc))
	if err != nil {
		t.Fatalf("sidecar.ConfigFromEnv(the sidecar container) = %v", err)
	}

	var so struct {
		Spec struct {
			Triggers []struct {
				Metadata          map[string]string `json:"metadata"`
				AuthenticationRef struct {
					Name string `json:"name"`
				} `json:"authenticationRef"`
			} `json:"triggers"`
		} `json:"spec"`
	}
	readYAML(t, kedaKafkaFile, &so)
	if len(so.Spec.Triggers) != 1 {
		t.Fatalf("%s has %d triggers; want one", kedaKafkaFile, len(so.Spec.Triggers))
	}
	trig := so.Spec.Triggers[0]
	var ta struct {
		Kind     string     `json:"kind"`
		Metadata objectMeta `json:"metadata"`
		Spec     struct {
			Env []struct {
				Parameter, Name, ContainerName string
			} `json:"env"`
			SecretTargetRef []struct {
				Parameter, Name, Key string
			} `json:"secretTargetRef"`
		} `json:"spec"`
	}
	readYAML(t, kedaAuthFile, &ta)
	if ta.Kind != "TriggerAuthentication" || ta.Metadata.Namespace != dep.Metadata.Namespace || trig.AuthenticationRef.Name != ta.Metadata.Name {
		t.Errorf("%s is %s %s/%s, the trigger's authenticationRef %q; want the TriggerAuthentication it names, in the Deployment's namespace %s",
			kedaAuthFile, ta.Kind, ta.Metadata.Namespace, ta.Metadata.Name, trig.AuthenticationRef.Name, dep.Metadata.Namespace)
	}

	keda := map[string]string{"PLAIN": "plaintext", "SCRAM-SHA-256": "scram_sha256", "SCRAM-SHA-512": "scram_sha512"}
	if cfg.SASL == nil || keda[cfg.SASL.Name()] == "" {
		t.Fatalf("the sidecar's SASL is %v; this test checks a PLAIN or SCRAM example", cfg.SASL)
	}
	if got, want := trig.Metadata["sasl"], keda[cfg.SASL.Name()]; got != want {
		t.Errorf("%s: sasl %q; the sidecar's FLOW_KAFKA_SASL_MECHANISM=%s is %q to KEDA", kedaKafkaFile, got, cfg.SASL.Name(), want)
	}
	if got, want := trig.Metadata["tls"], map[bool]string{true: "enable", false: ""}[cfg.TLS != nil]; got != want {
		t.Errorf("%s: tls %q; want %q, as the sidecar's FLOW_KAFKA_TLS", kedaKafkaFile, got, want)
	}

	// Each secret is the Secret key behind the file the sidecar reads for it.
	files := map[string]string{"password": "FLOW_KAFKA_SASL_PASSWORD_FILE", "ca": "FLOW_KAFKA_TLS_CA_FILE"}
	seen := map[string]bool{}
	for _, ref := range ta.Spec.SecretTargetRef {
		seen[ref.Parameter] = true
		v, ok := files[ref.Parameter]
		if !ok {
			t.Errorf("%s: secret parameter %q; the example's sidecar has no such secret", kedaAuthFile, ref.Parameter)
			continue
		}
		path := env[v]
		_, vol := m.mountFor(sc, filepath.Dir(path))
		switch {
		case vol == nil || vol.Secret == nil || vol.Secret.SecretName != ref.Name || ref.Name != sec.Metadata.Name:
			t.Errorf("%s: %s from Secret %q; the sidecar reads %s=%s from a mount of %+v", kedaAuthFile, ref.Parameter, ref.Name, v, path, vol)
		case filepath.Base(path) != ref.Key:
			t.Errorf("%s: %s from key %q; the sidecar reads key %q (%s=%s)", kedaAuthFile, ref.Parameter, ref.Key, filepath.Base(path), v, path)
		case sec.StringData[ref.Key] == "":
			t.Errorf("%s: %s from key %q, which the Secret does not hold", kedaAuthFile, ref.Parameter, ref.Key)
		}
	}
	for p := range files {
		if !seen[p] {
			t.Errorf("%s gives the scaler no %s; the sidecar has one", kedaAuthFile, p)
		}
	}
	if len(ta.Spec.Env) != 1 || ta.Spec.Env[0].Parameter != "username" || ta.Spec.Env[0].Name != "FLOW_KAFKA_SASL_USERNAME" ||
		ta.Spec.Env[0].ContainerName != sc.Name || env["FLOW_KAFKA_SASL_USERNAME"] == "" {
		t.Errorf("%s: env %+v; want username from the sidecar container's FLOW_KAFKA_SASL_USERNAME (%q)", kedaAuthFile, ta.Spec.Env, env["FLOW_KAFKA_SASL_USERNAME"])
	}
}
