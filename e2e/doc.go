// Package e2e holds the end-to-end suite of millrace: `millrace sidecar` and `millrace bridge`
// run as real processes with a real action against a real Kafka broker (kfake in the test
// process, or the Apache Kafka broker named by MILLRACE_KAFKA_BROKERS), and every record is
// counted by id through faults and bad input. It has no code of its own beyond this comment;
// the suite is in the _test.go files and runs with MILLRACE_E2E=1 (scripts/e2e). The broker
// and the test binary playing a misbehaving action come from internal/testkit.
package e2e
