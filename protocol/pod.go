package protocol

import "time"

// What both sides of the pod share: the sidecar and the streamlet's process (the bridge) read
// the same variables and keep the same limits. The streamlet protocol fixes the variables'
// names and the port; the message limit and the stop bound are its defaults.
const (
	// ProcessPort is the port of the process's gRPC services when FLOW_PROCESS_PORT is unset.
	ProcessPort = 9010
	// SidecarPort is the port FLOW_SIDECAR_PORT defaults to: the sidecar's callback service (in
	// millrace, the State service of protocol 1.1).
	SidecarPort = 9011
	// MaxMessageBytes is the message limit (4 MiB): of a Batch, and of an Emit when Start gives
	// no max_message_bytes.
	MaxMessageBytes = 4 << 20
	// StopTimeout bounds the end of a conversation: how long the sidecar waits after Stop
	// (FLOW_SHUTDOWN_TIMEOUT) and how long the bridge drains its batches on shutdown.
	StopTimeout = 20 * time.Second
)

// The environment variables of the pod that the streamlet protocol names.
const (
	EnvProcessPort       = "FLOW_PROCESS_PORT"        // the process's port, 127.0.0.1 only
	EnvSidecarPort       = "FLOW_SIDECAR_PORT"        // the sidecar's callback service, 127.0.0.1 only
	EnvStallWarningAfter = "FLOW_STALL_WARNING_AFTER" // a stalled partition's warning event waits this long
)
