package protocol

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// This file is a small RFC 8785 (JSON Canonicalization Scheme) writer for the values this
// package emits: objects, arrays, strings, booleans, int64 and float64 numbers.

// jsonValue is one JSON value ready for canonical serialisation.
type jsonValue interface {
	appendJCS(b []byte) ([]byte, error)
}

type (
	jsonString string
	jsonBool   bool
	jsonInt    int64   // written as its exact decimal digits
	jsonNumber float64 // written per ECMAScript Number.prototype.toString
	jsonArray  []jsonValue
	jsonObject map[string]jsonValue
)

// canonical serialises v per RFC 8785.
func canonical(v jsonValue) ([]byte, error) { return v.appendJCS(nil) }

func (s jsonString) appendJCS(b []byte) ([]byte, error) {
	if !utf8.ValidString(string(s)) {
		return nil, fmt.Errorf("string %q is not valid UTF-8", string(s))
	}
	return appendJCSString(b, string(s)), nil
}

// appendJCSString quotes s as ECMAScript's JSON.stringify does: the two-character escapes
// \b \t \n \f \r \" \\, \u00xx (lower-case hex) for the other control characters below
// U+0020, and every other character as itself, U+007F and U+2028 included. s is valid UTF-8.
func appendJCSString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c >= 0x20:
			b = append(b, c)
		case c == '\b':
			b = append(b, '\\', 'b')
		case c == '\t':
			b = append(b, '\\', 't')
		case c == '\n':
			b = append(b, '\\', 'n')
		case c == '\f':
			b = append(b, '\\', 'f')
		case c == '\r':
			b = append(b, '\\', 'r')
		default:
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		}
	}
	return append(b, '"')
}

func (v jsonBool) appendJCS(b []byte) ([]byte, error) { return strconv.AppendBool(b, bool(v)), nil }

func (v jsonInt) appendJCS(b []byte) ([]byte, error) { return strconv.AppendInt(b, int64(v), 10), nil }

func (v jsonNumber) appendJCS(b []byte) ([]byte, error) {
	f := float64(v)
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return nil, fmt.Errorf("number %v has no JSON form", f)
	}
	return append(b, formatES(f)...), nil
}

// formatES formats a finite float64 as ECMAScript's Number.prototype.toString does
// (ECMA-262 Number::toString with radix 10), which RFC 8785 requires: the shortest digits that
// round-trip, in plain notation for decimal exponents from -7 to 20, else in exponent form
// such as "1e+21" or "1.5e-7"; negative zero is "0".
func formatES(f float64) string {
	if f == 0 {
		return "0"
	}
	sign := ""
	if f < 0 {
		sign, f = "-", -f
	}
	// Shortest round-trip digits d.ddd and exponent e: value = 0.dddd × 10^n with n = e+1.
	e := strconv.FormatFloat(f, 'e', -1, 64)
	mant, expPart, _ := strings.Cut(e, "e")
	digits := strings.Replace(mant, ".", "", 1)
	exp, _ := strconv.Atoi(expPart) // strconv's own output: cannot fail
	n, k := exp+1, len(digits)
	switch {
	case k <= n && n <= 21:
		return sign + digits + strings.Repeat("0", n-k)
	case 0 < n && n <= 21:
		return sign + digits[:n] + "." + digits[n:]
	case -6 < n && n <= 0:
		return sign + "0." + strings.Repeat("0", -n) + digits
	}
	es := "+"
	if n-1 < 0 {
		es = "-"
	}
	frac := ""
	if k > 1 {
		frac = "." + digits[1:]
	}
	return sign + digits[:1] + frac + "e" + es + strconv.Itoa(abs(n-1))
}

func abs(i int) int {
	if i < 0 {
		return -i
	}
	return i
}

func (a jsonArray) appendJCS(b []byte) ([]byte, error) {
	b = append(b, '[')
	for i, v := range a {
		if i > 0 {
			b = append(b, ',')
		}
		var err error
		if b, err = v.appendJCS(b); err != nil {
			return nil, fmt.Errorf("[%d]: %w", i, err)
		}
	}
	return append(b, ']'), nil
}

func (o jsonObject) appendJCS(b []byte) ([]byte, error) {
	keys := make([]string, 0, len(o))
	for k := range o {
		if !utf8.ValidString(k) {
			return nil, fmt.Errorf("key %q is not valid UTF-8", k)
		}
		keys = append(keys, k)
	}
	slices.SortFunc(keys, compareUTF16)
	b = append(b, '{')
	for i, k := range keys {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendJCSString(b, k)
		b = append(b, ':')
		var err error
		if b, err = o[k].appendJCS(b); err != nil {
			return nil, fmt.Errorf("%s: %w", k, err)
		}
	}
	return append(b, '}'), nil
}

// compareUTF16 orders two strings by their UTF-16 code units, as RFC 8785 sorts keys.
func compareUTF16(a, b string) int {
	return slices.Compare(utf16.Encode([]rune(a)), utf16.Encode([]rune(b)))
}
