package stdio

import "github.com/ankka-flow/millrace/stdio/internal/errtext"

// Rule names the rule of the protocol that a line breaks, in a [ProtocolError]; [Rule.Fix]
// says how an action mends it. Callers decide by it (a rule before ready, a rule of framing),
// never by an error's text.
type Rule string

// The rules a line can break. The wire (DecodeMessage, LineReader) finds the first nine; the
// engine the ones about what a message may say at its point of the conversation; the bridge
// the outlet of an emit.
const (
	RuleLineTooLong      Rule = "line-too-long"      // a line over MaxLineBytes
	RuleNoNewline        Rule = "no-newline"         // stdout ended in the middle of a line
	RuleEmptyLine        Rule = "empty-line"         // a blank line where a message was expected
	RuleNotUTF8          Rule = "not-utf8"           // bytes that are not UTF-8
	RuleNotObject        Rule = "not-json"           // text that is no JSON object: a log or debug print on stdout
	RuleInvalidJSON      Rule = "invalid-json"       // starts as a JSON object, but is not valid JSON
	RuleBadField         Rule = "bad-field"          // valid JSON, but a field of the wrong JSON type ("type": 7)
	RuleNoType           Rule = "no-type"            // a JSON object without "type"
	RuleUnknownType      Rule = "unknown-type"       // a "type" the protocol does not have
	RuleUnexpected       Rule = "unexpected-message" // a type not allowed at its point: no ready first, or one only the engine sends
	RuleNotInFlight      Rule = "not-in-flight"      // an answer for a delivery that is not in flight
	RuleStagedTooMuch    Rule = "staged-too-much"    // more emit and metric bytes for one delivery than the engine holds
	RuleUndeclaredOutlet Rule = "undeclared-outlet"  // an emit to an outlet the action config does not declare
	RuleMalformedBatch   Rule = "malformed-batch"    // a batch envelope that breaks its rules
	RuleUndeclaredBatch  Rule = "undeclared-batch"   // an envelope from an action whose ready did not declare "batch": true
	RuleUndeclaredState  Rule = "undeclared-state"   // a state message from an action whose ready did not declare "state": true
)

// Fix says, in a sentence for the action's author, how to mend a line that breaks r.
func (r Rule) Fix() string {
	switch r {
	case RuleLineTooLong, RuleStagedTooMuch:
		return "write large data to a file in MILLSTREAM_WORKDIR and send its path"
	case RuleNoNewline:
		return `end every message with \n (and flush stdout after it)`
	case RuleEmptyLine:
		return "write exactly one JSON object per line, no blank lines"
	case RuleNotUTF8:
		return `encode stdout as UTF-8 and never cut text inside a character (Python: sys.stdout.reconfigure(encoding="utf-8"); Perl: use open qw(:std :encoding(UTF-8)))`
	case RuleNotObject:
		return "stdout carries protocol lines only: write logs and debug prints to stderr (Python: print(…, file=sys.stderr))"
	case RuleInvalidJSON:
		return "write each message with a JSON encoder (json.dumps, JSON.stringify, to_json), not by pasting strings together"
	case RuleBadField:
		return `give each field the JSON type docs/protocol.md says ("type", "delivery", "message" strings, "retryable" a boolean)`
	case RuleNoType, RuleUnknownType:
		return `give every message a "type": ready, then emit, metric, state, done, error or abstain`
	case RuleUnexpected:
		return "answer hello with one ready, then send only emit, metric, state, done, error or abstain"
	case RuleNotInFlight:
		return `answer each delivery exactly once, copying "delivery" from its item, and write nothing between deliveries`
	case RuleMalformedBatch:
		return `write an envelope as {"type":"batch","messages":[…]} holding emit, metric, state, done, error and abstain objects only, or one message per line`
	case RuleUndeclaredBatch:
		return `declare "batch": true in the ready line to answer in envelopes, or write one message per line`
	case RuleUndeclaredState:
		return `declare "state": true in the ready line to stage state (and read item.state), or send no state messages`
	case RuleUndeclaredOutlet:
		return "emit to a declared outlet, or declare it with --out PORT=SCHEMA on the config line"
	}
	return "follow the action protocol (docs/protocol.md)"
}

// keepLine is how much of an offending line a ProtocolError keeps.
const keepLine = 256

// ProtocolError is a line of the action that breaks the protocol: the rule, what is wrong in
// words and the start of the line. It matches ErrProtocol, and Err when set, with errors.Is;
// callers take its fields with errors.As, never its text.
type ProtocolError struct {
	Rule   Rule
	Detail string // what is wrong, as a person reads it, without the line
	Line   []byte // the first bytes of the offending line (a copy); nil when no line is at fault
	Err    error  // a sentinel the violation also is (ErrLineTooLong, ErrNoNewline), or nil
}

// NewProtocolError returns the violation of rule by line (copied, up to its first few hundred
// bytes; nil for none), detail saying what is wrong.
func NewProtocolError(rule Rule, line []byte, detail string) *ProtocolError {
	e := &ProtocolError{Rule: rule, Detail: detail}
	if line != nil {
		e.Line = append([]byte{}, line[:min(len(line), keepLine)]...)
	}
	return e
}

// Error is ErrProtocol's text, the detail and the quoted start of the line.
func (e *ProtocolError) Error() string {
	s := ErrProtocol.Error() + ": " + e.Detail
	if e.Line != nil {
		s += ": " + errtext.Quote(e.Line)
	}
	return s
}

// Is makes errors.Is(err, ErrProtocol) true.
func (e *ProtocolError) Is(target error) bool { return target == ErrProtocol }

// Unwrap returns Err.
func (e *ProtocolError) Unwrap() error { return e.Err }
