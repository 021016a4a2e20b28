package stdio

import (
	stdjson "encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzValidEnd checks the one-pass validator against encoding/json and utf8: a value it says
// ends at end, followed by nothing but whitespace, is exactly what json.Valid and utf8.Valid
// accept together; and a value it bounds is valid on its own.
func FuzzValidEnd(f *testing.F) {
	for _, s := range []string{
		`{"a":[1,-2.5e+3,true,false,null,"x\u00e9\n"]}`, ` [ ] `, `{}`, `"\ud800"`, `01`, `-`, `1.`, `1e`, `[1,]`,
		`{"a" 1}`, `{"a":1,}`, "\"\xff\"", "\"\x1f\"", `"\x"`, `tru`, `nulll`, `[[[[]]]]`, `{"a":{"b":{}}}`, "1\v",
		`"0123456789abcdef\"x"`, "\"0123456789ab\x01cdef\"", "\"0123456789abcd\xc3\xa9\"", "\"0123456789abcd\xc3\"", "\"01234567\x7f89abcdef\"",
		strings.Repeat("[", 10001) + strings.Repeat("]", 10001), strings.Repeat("[", 10000) + strings.Repeat("]", 10000),
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		end := validEnd(b, 0)
		whole := end >= 0 && skipSpace(b, end) == len(b)
		if want := stdjson.Valid(b) && utf8.Valid(b); whole != want {
			t.Fatalf("validEnd(%q) = %d (whole %v); json.Valid and utf8.Valid say %v", b, end, whole, want)
		}
		if end >= 0 && (!stdjson.Valid(b[:end]) || !utf8.Valid(b[:end])) {
			t.Fatalf("validEnd(%q) = %d, but %q is not valid", b, end, b[:end])
		}
	})
}
