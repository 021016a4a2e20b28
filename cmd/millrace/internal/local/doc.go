// Package local is `millrace run`, used only by this binary (cmd/millrace): it runs one or
// several streamlets that package actiondir loaded on one machine: an in-process Kafka broker
// (kfake) unless real brokers are named, each streamlet's real bridge and sidecar talking gRPC
// over loopback, the input lines produced as records and every output record printed.
package local
