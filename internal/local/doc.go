// Package local is the action author's side of millrace, used only by this binary
// (cmd/millrace): it reads an action directory or a config line for the tools (`millrace test
// action`, `millrace describe`), writes new actions from templates (`millrace init`), and runs
// one or several streamlets on one machine (`millrace run`): an in-process Kafka broker
// (kfake) unless real brokers are named, each streamlet's real bridge and sidecar talking gRPC
// over loopback, the input lines produced as records and every output record printed.
package local
