package protocol_test

import (
	"google.golang.org/protobuf/proto"

	"github.com/ankka-flow/millrace/protocol"
	flowv1 "github.com/ankka-flow/millrace/protocol/ankka/flow/v1"
)

// port is a valid port with a json contract for schema.
func port(name, schema string) *flowv1.Port {
	return &flowv1.Port{Name: name, Contract: &flowv1.Contract{
		Format: "json", SchemaName: schema, Fingerprint: protocol.Fingerprint(schema),
	}}
}

// validSpec is a valid Spec; tests change copies of it.
func validSpec() *flowv1.Spec {
	return &flowv1.Spec{
		ProtocolVersion: "1.0",
		Sdk:             &flowv1.SdkInfo{Name: "millrace", Version: "0.1.0"},
		Streamlet: &flowv1.StreamletDescriptor{
			Name:        "score-listing",
			Description: "Scores listings",
			Inlets:      []*flowv1.Port{port("listings", "listing.v1")},
			Outlets:     []*flowv1.Port{port("scores", "score.v1"), port("rejects", "listing.v1")},
			ConfigParameters: []*flowv1.ConfigParameter{
				{Key: "min-rooms", Type: flowv1.ConfigType_INTEGER, DefaultValue: "2"},
				{Key: "model", Type: flowv1.ConfigType_STRING},
			},
		},
	}
}

// edit returns a changed deep copy of validSpec.
func edit(f func(s *flowv1.Spec)) *flowv1.Spec {
	s := proto.Clone(validSpec()).(*flowv1.Spec)
	f(s)
	return s
}
