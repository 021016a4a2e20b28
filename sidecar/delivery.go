package sidecar

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Delivery is the sidecar's promise for what it writes into Kafka (FLOW_DELIVERY).
type Delivery string

const (
	// AtLeastOnce is the spec's behaviour and the default: each round produces the
	// acknowledged batches' emits and waits for the broker to confirm every one; their offsets
	// are committed after, with every round confirmed in the commit interval. A failure
	// between the two redelivers, so an emit may be written twice.
	AtLeastOnce Delivery = "at-least-once"
	// ExactlyOnce makes the rounds of each commit interval one Kafka transaction: the emits and the input
	// offsets commit together or not at all, so a reader with isolation.level=read_committed
	// sees every emit once. Effects outside Kafka are not covered (the bridge's idempotencyKey
	// is for those).
	ExactlyOnce Delivery = "exactly-once"
)

// envDelivery names the delivery variable.
const envDelivery = "FLOW_DELIVERY"

// parseDelivery reads FLOW_DELIVERY: empty is at-least-once; anything but the two names is
// refused by name.
func parseDelivery(s string) (Delivery, error) {
	switch d := Delivery(strings.TrimSpace(s)); d {
	case "", AtLeastOnce:
		return AtLeastOnce, nil
	case ExactlyOnce:
		return ExactlyOnce, nil
	default:
		return "", fmt.Errorf("%s=%s is not a delivery: write %s (the default) or %s", envDelivery, s, AtLeastOnce, ExactlyOnce)
	}
}

// transactionalID is the exactly-once producer's transactional id: stable for one replica
// across restarts, so that a restarted sidecar fences its predecessor (the broker aborts the
// predecessor's open transaction and refuses its writes), and distinct between replicas.
// It is "<group>.<pod>" with the pod's name (FLOW_POD_NAME) where set; outside Kubernetes it
// is "<group>.<host>:<process port>", since replicas on one host must use distinct process
// ports. Starting with the group, it fits a PREFIXED TransactionalId ACL on the group's name.
func transactionalID(group, pod, host string, processPort int) string {
	if pod = strings.TrimSpace(pod); pod != "" {
		return group + "." + pod
	}
	if host == "" {
		host = "localhost"
	}
	return group + "." + host + ":" + strconv.Itoa(processPort)
}

// hostname is the host's name for a transactional id, "" when unknown.
func hostname() string {
	h, err := os.Hostname()
	if err != nil {
		return ""
	}
	return h
}
