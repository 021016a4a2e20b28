package protocol

import (
	"fmt"
	"strings"

	flowv1 "github.com/ankka-flow/millrace/protocol/ankka/flow/v1"
)

// Compare compares the descriptor a streamlet was deployed with and the one its process
// reports in discovery, field by field, and returns every difference, each naming its path
// and both values (DESCRIPTOR.md, "Comparison"). Descriptions count. Ports are matched by
// name within inlets and within outlets, and config parameters by key: a port or parameter on
// one side only is named as such, one on both sides is compared field by field at the path of
// its deployed position, and a different order of the matched entries is one more
// difference. A nil descriptor compares as an empty one. No difference gives nil.
func Compare(deployed, discovered *flowv1.StreamletDescriptor) Problems {
	var ps Problems
	compareText(&ps, "name", "", deployed.GetName(), discovered.GetName())
	compareText(&ps, "description", "", deployed.GetDescription(), discovered.GetDescription())
	comparePorts(&ps, "inlets", deployed.GetInlets(), discovered.GetInlets())
	comparePorts(&ps, "outlets", deployed.GetOutlets(), discovered.GetOutlets())
	compareParams(&ps, deployed.GetConfigParameters(), discovered.GetConfigParameters())
	return ps
}

// compareText reports a difference between two strings; what, when set, names the port or
// parameter the field belongs to.
func compareText(ps *Problems, path, what, deployed, discovered string) {
	if deployed != discovered {
		ps.add(path, fmt.Sprintf("%sdeployed %q, discovered %q", what, deployed, discovered))
	}
}

// match pairs the entries of two lists by name: pair[i] is the index in discovered of the
// entry matching deployed[i], or -1. Duplicate names pair in order of appearance.
func match(deployed, discovered []string) (pair []int, unmatched []bool) {
	pair = make([]int, len(deployed))
	unmatched = make([]bool, len(discovered))
	for j := range unmatched {
		unmatched[j] = true
	}
	for i, name := range deployed {
		pair[i] = -1
		for j, other := range discovered {
			if unmatched[j] && other == name {
				pair[i], unmatched[j] = j, false
				break
			}
		}
	}
	return pair, unmatched
}

// compareOrder reports matched entries that appear in another order.
func compareOrder(ps *Problems, path, what string, deployed, discovered []string, pair []int, unmatched []bool) {
	var dep, dis []string
	for i, j := range pair {
		if j >= 0 {
			dep = append(dep, deployed[i])
		}
	}
	for j, name := range discovered {
		if !unmatched[j] {
			dis = append(dis, name)
		}
	}
	if strings.Join(dep, "\x00") != strings.Join(dis, "\x00") {
		ps.add(path, fmt.Sprintf("%s in another order: deployed %s, discovered %s", what, quoteList(dep), quoteList(dis)))
	}
}

func quoteList(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = fmt.Sprintf("%q", n)
	}
	return "[" + strings.Join(q, ", ") + "]"
}

func comparePorts(ps *Problems, list string, deployed, discovered []*flowv1.Port) {
	names := func(ports []*flowv1.Port) []string {
		n := make([]string, len(ports))
		for i, p := range ports {
			n[i] = p.GetName()
		}
		return n
	}
	depNames, disNames := names(deployed), names(discovered)
	pair, unmatched := match(depNames, disNames)
	for i, j := range pair {
		at := fmt.Sprintf("%s[%d]", list, i)
		if j < 0 {
			ps.add(at, fmt.Sprintf("port %q deployed but not discovered", depNames[i]))
			continue
		}
		what := fmt.Sprintf("port %q: ", depNames[i])
		dc, vc := deployed[i].GetContract(), discovered[j].GetContract()
		compareText(ps, at+".contract.format", what, dc.GetFormat(), vc.GetFormat())
		compareText(ps, at+".contract.schema_name", what, dc.GetSchemaName(), vc.GetSchemaName())
		compareText(ps, at+".contract.fingerprint", what, dc.GetFingerprint(), vc.GetFingerprint())
	}
	for j, extra := range unmatched {
		if extra {
			ps.add(list, fmt.Sprintf("port %q discovered but not deployed", disNames[j]))
		}
	}
	compareOrder(ps, list, "ports", depNames, disNames, pair, unmatched)
}

func compareParams(ps *Problems, deployed, discovered []*flowv1.ConfigParameter) {
	keys := func(params []*flowv1.ConfigParameter) []string {
		k := make([]string, len(params))
		for i, p := range params {
			k[i] = p.GetKey()
		}
		return k
	}
	depKeys, disKeys := keys(deployed), keys(discovered)
	pair, unmatched := match(depKeys, disKeys)
	for i, j := range pair {
		at := fmt.Sprintf("config_parameters[%d]", i)
		if j < 0 {
			ps.add(at, fmt.Sprintf("parameter %q deployed but not discovered", depKeys[i]))
			continue
		}
		what := fmt.Sprintf("parameter %q: ", depKeys[i])
		dp, vp := deployed[i], discovered[j]
		compareText(ps, at+".description", what, dp.GetDescription(), vp.GetDescription())
		if dp.GetType() != vp.GetType() {
			ps.add(at+".type", fmt.Sprintf("%sdeployed %s, discovered %s", what, dp.GetType(), vp.GetType()))
		}
		compareText(ps, at+".default_value", what, dp.GetDefaultValue(), vp.GetDefaultValue())
	}
	for j, extra := range unmatched {
		if extra {
			ps.add("config_parameters", fmt.Sprintf("parameter %q discovered but not deployed", disKeys[j]))
		}
	}
	compareOrder(ps, "config_parameters", "parameters", depKeys, disKeys, pair, unmatched)
}
