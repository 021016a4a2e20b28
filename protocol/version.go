package protocol

import (
	"fmt"
	"regexp"
	"strconv"
)

// versionPattern is MAJOR.MINOR: two decimal numbers without sign or leading zeros.
var versionPattern = regexp.MustCompile(`^(0|[1-9][0-9]{0,8})\.(0|[1-9][0-9]{0,8})$`)

// parseVersion splits a MAJOR.MINOR version; ok is false when v is not of that form.
func parseVersion(v string) (major, minor int, ok bool) {
	m := versionPattern.FindStringSubmatch(v)
	if m == nil {
		return 0, 0, false
	}
	major, _ = strconv.Atoi(m[1]) // at most 9 digits: cannot fail
	minor, _ = strconv.Atoi(m[2])
	return major, minor, true
}

// CheckVersion reports whether a peer speaking protocol version theirs is accepted by this
// module, which speaks Version: it is when the majors are equal and their minor is not later
// than ours. A refusal wraps ErrVersion and names both versions and the way out.
func CheckVersion(theirs string) error {
	return CheckVersionAgainst(Version, theirs)
}

// CheckVersionAgainst is CheckVersion for a side speaking ours instead of Version; the
// version fixtures use it. A malformed ours or theirs is refused too, wrapping ErrVersion.
func CheckVersionAgainst(ours, theirs string) error {
	oMajor, oMinor, ok := parseVersion(ours)
	if !ok {
		return fmt.Errorf("%w: our own protocol version %q is not of the form MAJOR.MINOR (e.g. \"1.0\"); this is a bug in this build", ErrVersion, ours)
	}
	tMajor, tMinor, ok := parseVersion(theirs)
	switch {
	case !ok:
		return fmt.Errorf("%w: protocol version %q is not of the form MAJOR.MINOR (e.g. %q); this side speaks %s: fix the protocol_version the process reports", ErrVersion, theirs, ours, ours)
	case tMajor != oMajor:
		return fmt.Errorf("%w: protocol version %s is another major than %s, which this side speaks: use an SDK and a sidecar of the same major (%d.x)", ErrVersion, theirs, ours, oMajor)
	case tMinor > oMinor:
		return fmt.Errorf("%w: protocol version %s is later than %s, which this side speaks: upgrade this side to %s or later, or build the process with an SDK speaking %d.%d at most", ErrVersion, theirs, ours, theirs, oMajor, oMinor)
	}
	return nil
}
