package protocol

import (
	"fmt"
	"regexp"
	"strings"
	"unicode/utf8"

	flowv1 "github.com/ankka-flow/millrace/protocol/ankka/flow/v1"
)

var (
	// namePattern is the streamlet name's, and (a rule of this package) a port name's.
	namePattern = regexp.MustCompile(`^[a-z0-9-]{1,63}$`)
	// keyPattern is a config parameter key's.
	keyPattern = regexp.MustCompile(`^[a-z][a-z0-9-]*$`)
)

// FormatJSON is the only contract format of protocol 1.0.
const FormatJSON = "json"

// Validate checks a Spec against every rule of DESCRIPTOR.md ("Validation") and returns every
// problem at once, in a fixed order: protocol_version, sdk, then the streamlet's name,
// inlets, outlets and config parameters, each in order. Paths are relative to the Spec, with
// the streamlet's own fields unprefixed (DESCRIPTOR.md, "Paths"), e.g.
// "outlets[1].contract.fingerprint". It checks the form of protocol_version only; whether
// that version is accepted is CheckVersion's question. A nil spec is one problem.
func Validate(spec *flowv1.Spec) Problems {
	var ps Problems
	if spec == nil {
		ps.add("", "missing: no Spec was given")
		return ps
	}
	if v := spec.GetProtocolVersion(); v == "" {
		ps.add("protocol_version", fmt.Sprintf("missing; want MAJOR.MINOR, %q for this protocol", BaseVersion)) // what a stateless process reports: the example fits most
	} else if _, _, ok := parseVersion(v); !ok {
		ps.add("protocol_version", fmt.Sprintf("%q is not of the form MAJOR.MINOR; want e.g. %q", v, BaseVersion))
	}
	if spec.GetSdk() == nil {
		ps.add("sdk", "missing; the SDK that built the process must name itself and its version")
	} else {
		requireText(&ps, "sdk.name", spec.GetSdk().GetName(), "name the SDK that built the process")
		requireText(&ps, "sdk.version", spec.GetSdk().GetVersion(), "give the version of the SDK that built the process")
	}
	d := spec.GetStreamlet()
	if d == nil {
		ps.add("streamlet", "missing; the Spec must describe the streamlet")
		return ps
	}
	checkName(&ps, "name", d.GetName(), "streamlet name")
	checkText(&ps, "description", d.GetDescription())
	seen := map[string]string{} // port name → path of its first use
	checkPorts(&ps, "inlets", d.GetInlets(), seen)
	checkPorts(&ps, "outlets", d.GetOutlets(), seen)
	checkParams(&ps, d.GetConfigParameters())
	return ps
}

func checkPorts(ps *Problems, list string, ports []*flowv1.Port, seen map[string]string) {
	for i, p := range ports {
		at := fmt.Sprintf("%s[%d]", list, i)
		if p == nil {
			ps.add(at, "missing: the list holds an empty entry")
			continue
		}
		if checkName(ps, at+".name", p.GetName(), "port name") {
			if first, dup := seen[p.GetName()]; dup {
				ps.add(at+".name", fmt.Sprintf("%q is already the name of %s; port names must be unique across inlets and outlets", p.GetName(), first))
			} else {
				seen[p.GetName()] = at
			}
		}
		c := p.GetContract()
		if c == nil {
			ps.add(at+".contract", "missing; every port needs a contract: format, schema_name and fingerprint")
			continue
		}
		if f := c.GetFormat(); f != FormatJSON {
			ps.add(at+".contract.format", fmt.Sprintf("%q is not a contract format of protocol %s; want %q", f, BaseVersion, FormatJSON)) // 1.1 adds no format
		}
		schema := c.GetSchemaName()
		if schema == "" {
			ps.add(at+".contract.schema_name", "missing; name the schema of the port's records, e.g. \"cart-events.v1\"")
		} else if checkText(ps, at+".contract.schema_name", schema) {
			// Without a schema name there is nothing to fingerprint: the fingerprint is not checked.
			if want := Fingerprint(schema); c.GetFingerprint() != want {
				ps.add(at+".contract.fingerprint", fmt.Sprintf("%q does not match schema_name %q; want %q, Base64(SHA-256(UTF-8(schema_name)))", c.GetFingerprint(), schema, want))
			}
		}
	}
}

func checkParams(ps *Problems, params []*flowv1.ConfigParameter) {
	seen := map[string]string{}
	for i, p := range params {
		at := fmt.Sprintf("config_parameters[%d]", i)
		if p == nil {
			ps.add(at, "missing: the list holds an empty entry")
			continue
		}
		switch k := p.GetKey(); {
		case k == "":
			ps.add(at+".key", "missing; want a key matching [a-z][a-z0-9-]*")
		case !keyPattern.MatchString(k):
			ps.add(at+".key", fmt.Sprintf("%q does not match [a-z][a-z0-9-]*: a lower-case letter, then lower-case letters, digits and '-'", k))
		default:
			if first, dup := seen[k]; dup {
				ps.add(at+".key", fmt.Sprintf("%q is already the key of %s; config keys must be unique", k, first))
			} else {
				seen[k] = at
			}
		}
		checkText(ps, at+".description", p.GetDescription())
		t := p.GetType()
		if _, known := flowv1.ConfigType_name[int32(t)]; !known {
			ps.add(at+".type", fmt.Sprintf("unknown config type %d; want one of %s", int32(t), configTypeNames()))
			continue
		}
		if def := p.GetDefaultValue(); def != "" {
			if _, err := ParseConfigValue(t, def); err != nil {
				ps.add(at+".default_value", valueMessage(t, def))
			}
		}
	}
}

// checkName reports a name that does not match namePattern and says whether it matched.
func checkName(ps *Problems, path, name, what string) bool {
	switch {
	case name == "":
		ps.add(path, fmt.Sprintf("missing; want a %s of 1 to 63 characters from [a-z0-9-]", what))
	case !namePattern.MatchString(name):
		ps.add(path, fmt.Sprintf("%q is not a valid %s: want 1 to 63 characters from [a-z0-9-] (lower-case letters, digits, '-')", name, what))
	default:
		return true
	}
	return false
}

// requireText reports an empty or invalid string.
func requireText(ps *Problems, path, s, how string) {
	if s == "" {
		ps.add(path, "missing; "+how)
		return
	}
	checkText(ps, path, s)
}

// checkText reports a string that is not valid UTF-8 (possible only in a Spec built in Go,
// never in one read from the wire or JSON) and says whether it was valid.
func checkText(ps *Problems, path, s string) bool {
	if !utf8.ValidString(s) {
		ps.add(path, fmt.Sprintf("%q is not valid UTF-8", s))
		return false
	}
	return true
}

// configTypeNames lists the config types' names in number order, for messages.
func configTypeNames() string {
	names := make([]string, len(flowv1.ConfigType_name))
	for i := range names {
		names[i] = flowv1.ConfigType_name[int32(i)]
	}
	return strings.Join(names, ", ")
}
