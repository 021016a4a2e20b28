package protocol

import (
	"fmt"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protojson"

	flowv1 "github.com/ankka-flow/millrace/protocol/ankka/flow/v1"
)

// MarshalDescriptor returns the canonical JSON of spec, the exact bytes of descriptor.json
// (DESCRIPTOR.md, "Canonical JSON"): the proto3 JSON mapping with lowerCamelCase names, every
// field present (a missing message as an object of empty fields, "" and []), config types by
// name, serialised per RFC 8785, with no trailing newline. The same spec always gives the
// same bytes. It fails, wrapping ErrDescriptor, only for a nil spec or a string that is not
// valid UTF-8 (the error names its path); it does not validate (see Validate).
func MarshalDescriptor(spec *flowv1.Spec) ([]byte, error) {
	if spec == nil {
		return nil, fmt.Errorf("%w: MarshalDescriptor was given a nil spec", ErrDescriptor)
	}
	if path, ok := invalidUTF8(spec); !ok {
		return nil, fmt.Errorf("%w: %s is not valid UTF-8; JSON holds text only, so fix the string", ErrDescriptor, path)
	}
	b, err := canonical(specJSON(spec))
	if err != nil { // unreachable: every string was checked above
		return nil, fmt.Errorf("%w: %w", ErrDescriptor, err)
	}
	return b, nil
}

// UnmarshalDescriptor reads descriptor.json. It accepts any proto3 JSON form of a Spec, not
// only the canonical one: any key order and whitespace, lowerCamelCase or proto field names,
// null or a missing key for an empty field, config types by name or number. It refuses,
// wrapping ErrDescriptor, anything else: malformed JSON, an unknown key (a typo or a field of
// a later protocol version), a duplicate key, a value of the wrong JSON type, an unknown
// config type name. It does not validate (see Validate).
func UnmarshalDescriptor(data []byte) (*flowv1.Spec, error) {
	spec := new(flowv1.Spec)
	if err := protojson.Unmarshal(data, spec); err != nil {
		return nil, fmt.Errorf("%w: %w; descriptor.json must be the JSON form of ankka.flow.v1.Spec (DESCRIPTOR.md)", ErrDescriptor, err)
	}
	return spec, nil
}

// specJSON maps a Spec to its proto3 JSON value with every field present.
func specJSON(s *flowv1.Spec) jsonObject {
	return jsonObject{
		"protocolVersion": jsonString(s.GetProtocolVersion()),
		"sdk": jsonObject{
			"name":    jsonString(s.GetSdk().GetName()),
			"version": jsonString(s.GetSdk().GetVersion()),
		},
		"streamlet": streamletJSON(s.GetStreamlet()),
	}
}

func streamletJSON(d *flowv1.StreamletDescriptor) jsonObject {
	params := jsonArray{}
	for _, p := range d.GetConfigParameters() {
		params = append(params, jsonObject{
			"key":          jsonString(p.GetKey()),
			"description":  jsonString(p.GetDescription()),
			"type":         configTypeJSON(p.GetType()),
			"defaultValue": jsonString(p.GetDefaultValue()),
		})
	}
	return jsonObject{
		"name":             jsonString(d.GetName()),
		"description":      jsonString(d.GetDescription()),
		"inlets":           portsJSON(d.GetInlets()),
		"outlets":          portsJSON(d.GetOutlets()),
		"configParameters": params,
	}
}

func portsJSON(ports []*flowv1.Port) jsonArray {
	a := jsonArray{}
	for _, p := range ports {
		a = append(a, jsonObject{
			"name": jsonString(p.GetName()),
			"contract": jsonObject{
				"format":      jsonString(p.GetContract().GetFormat()),
				"schemaName":  jsonString(p.GetContract().GetSchemaName()),
				"fingerprint": jsonString(p.GetContract().GetFingerprint()),
			},
		})
	}
	return a
}

// configTypeJSON is a config type's name, or its number when the value has no name, as the
// proto3 JSON mapping writes an unknown enum value. Validate reports such a value.
func configTypeJSON(t flowv1.ConfigType) jsonValue {
	if name, ok := flowv1.ConfigType_name[int32(t)]; ok {
		return jsonString(name)
	}
	return jsonInt(t)
}

// invalidUTF8 returns the path of the first string of s that is not valid UTF-8, in the path
// syntax of Validate, and ok false; or ok true when every string is valid.
func invalidUTF8(s *flowv1.Spec) (path string, ok bool) {
	type field struct{ path, value string }
	fields := []field{
		{"protocol_version", s.GetProtocolVersion()},
		{"sdk.name", s.GetSdk().GetName()},
		{"sdk.version", s.GetSdk().GetVersion()},
		{"name", s.GetStreamlet().GetName()},
		{"description", s.GetStreamlet().GetDescription()},
	}
	ports := func(list string, ps []*flowv1.Port) {
		for i, p := range ps {
			at := fmt.Sprintf("%s[%d].", list, i)
			fields = append(fields,
				field{at + "name", p.GetName()},
				field{at + "contract.format", p.GetContract().GetFormat()},
				field{at + "contract.schema_name", p.GetContract().GetSchemaName()},
				field{at + "contract.fingerprint", p.GetContract().GetFingerprint()})
		}
	}
	ports("inlets", s.GetStreamlet().GetInlets())
	ports("outlets", s.GetStreamlet().GetOutlets())
	for i, p := range s.GetStreamlet().GetConfigParameters() {
		at := fmt.Sprintf("config_parameters[%d].", i)
		fields = append(fields,
			field{at + "key", p.GetKey()},
			field{at + "description", p.GetDescription()},
			field{at + "default_value", p.GetDefaultValue()})
	}
	for _, f := range fields {
		if !utf8.ValidString(f.value) {
			return f.path, false
		}
	}
	return "", true
}
