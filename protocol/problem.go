package protocol

import "strings"

// Problem is one thing wrong with a descriptor or a configuration. Path names the field it
// concerns, relative to the message checked (DESCRIPTOR.md, "Paths"), e.g.
// "outlets[1].contract.fingerprint"; it may be empty when the problem concerns the whole.
type Problem struct {
	Path    string
	Message string
}

// String renders the problem as "PATH: MESSAGE", or MESSAGE alone when Path is empty.
func (p Problem) String() string {
	if p.Path == "" {
		return p.Message
	}
	return p.Path + ": " + p.Message
}

// Problems is every problem found, in a deterministic order. Nil or empty means none.
type Problems []Problem

// Error joins the problems, one per line, so Problems can be returned as an error. Return
// Err rather than a Problems value to avoid a non-nil error holding no problem.
func (ps Problems) Error() string {
	lines := make([]string, len(ps))
	for i, p := range ps {
		lines[i] = p.String()
	}
	return strings.Join(lines, "\n")
}

// Err returns ps as an error, or nil when there is no problem.
func (ps Problems) Err() error {
	if len(ps) == 0 {
		return nil
	}
	return ps
}

// add appends a problem whose path is path, with a formatted message.
func (ps *Problems) add(path, message string) {
	*ps = append(*ps, Problem{Path: path, Message: message})
}
