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

// CheckVersion reports whether a process speaking protocol version theirs (its
// Spec.protocol_version) is accepted by this module, which speaks Version: it is when the
// majors are equal and their minor is not later than ours. A refusal wraps ErrVersion and
// names both versions and the way out. It is safe for concurrent use.
func CheckVersion(theirs string) error {
	return CheckVersionAgainst(Version, theirs)
}

// CheckVersionAgainst is CheckVersion for a sidecar speaking ours instead of Version; the
// version fixtures use it. A malformed ours or theirs is refused too, wrapping ErrVersion.
// The messages are written for the check the protocol defines: a sidecar (ours) checking a
// process's Spec (theirs).
func CheckVersionAgainst(ours, theirs string) error {
	oMajor, oMinor, ok := parseVersion(ours)
	if !ok {
		return fmt.Errorf("%w: the sidecar's own protocol version %q is not of the form MAJOR.MINOR (e.g. \"1.0\"); this is a bug in the sidecar", ErrVersion, ours)
	}
	tMajor, tMinor, ok := parseVersion(theirs)
	switch {
	case !ok:
		return fmt.Errorf("%w: the process reports protocol version %q, which is not of the form MAJOR.MINOR; the sidecar speaks %s: fix the protocol_version of the process's Spec (its SDK), e.g. %q", ErrVersion, theirs, ours, ours)
	case tMajor != oMajor:
		return fmt.Errorf("%w: the process speaks protocol %s and the sidecar %s, another major version: build the process with an SDK speaking %d.x (%d.%d at most), or run a sidecar speaking %d.x", ErrVersion, theirs, ours, oMajor, oMajor, oMinor, tMajor)
	case tMinor > oMinor:
		return fmt.Errorf("%w: the process speaks protocol %s, later than %s, which the sidecar speaks: upgrade the sidecar to one speaking %s or later, or build the process with an SDK speaking %d.%d at most", ErrVersion, theirs, ours, theirs, oMajor, oMinor)
	}
	return nil
}

// VersionKeepsState reports whether a process speaking version may keep state: it does from
// minor 1 of major 1 on (the State service), it does not at 1.0. ok is false for a malformed
// version or another major, of which nothing is known here: the version check refuses those
// with its own message. It is safe for concurrent use.
func VersionKeepsState(version string) (keeps, ok bool) {
	major, minor, ok := parseVersion(version)
	if !ok || major != 1 {
		return false, false
	}
	return minor >= 1, true
}
