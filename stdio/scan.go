package stdio

import (
	"bytes"
	"encoding/binary"
	"unicode/utf8"
)

// maxDepth is the deepest nesting validEnd accepts, encoding/json's.
const maxDepth = 10000

// validEnd returns the index just after the valid JSON value (UTF-8 throughout, nested at
// most maxDepth deep) that starts at b[i] after any whitespace, or -1 when there is none. It
// is json.Valid and utf8.Valid in one pass that also says where the value ends.
func validEnd(b []byte, i int) int {
	var small [16]byte
	stack := small[:0] // the open containers, '{' or '['
	for {
		i = skipSpace(b, i)
		if i >= len(b) {
			return -1
		}
		switch c := b[i]; c {
		case '{', '[':
			if len(stack) == maxDepth {
				return -1
			}
			i = skipSpace(b, i+1)
			if i < len(b) && b[i] == c+2 { // '}' and ']' are two past '{' and '['
				i++
				break
			}
			stack = append(stack, c)
			if c == '{' {
				if i = validKey(b, i); i < 0 {
					return -1
				}
			}
			continue // the container's first value
		case '"':
			if i = validString(b, i); i < 0 {
				return -1
			}
		case 't':
			if i = literal(b, i, "true"); i < 0 {
				return -1
			}
		case 'f':
			if i = literal(b, i, "false"); i < 0 {
				return -1
			}
		case 'n':
			if i = literal(b, i, "null"); i < 0 {
				return -1
			}
		default:
			if i = validNumber(b, i); i < 0 {
				return -1
			}
		}
		// After a value: close the containers that end here, then on to the next value.
		for {
			if len(stack) == 0 {
				return i
			}
			i = skipSpace(b, i)
			if i >= len(b) {
				return -1
			}
			top := stack[len(stack)-1]
			if b[i] == ',' {
				i++
				if top == '{' {
					if i = validKey(b, skipSpace(b, i)); i < 0 {
						return -1
					}
				}
				break
			}
			if b[i] != top+2 {
				return -1
			}
			stack = stack[:len(stack)-1]
			i++
		}
	}
}

// validKey returns the index after the key at b[i] and its colon, or -1.
func validKey(b []byte, i int) int {
	if i >= len(b) || b[i] != '"' {
		return -1
	}
	if i = validString(b, i); i < 0 {
		return -1
	}
	if i = skipSpace(b, i); i >= len(b) || b[i] != ':' {
		return -1
	}
	return i + 1
}

func literal(b []byte, i int, word string) int {
	if !bytes.HasPrefix(b[i:], []byte(word)) {
		return -1
	}
	return i + len(word)
}

// inString[c] reports whether byte c stands for itself inside a JSON string: ASCII from the
// space up, except the quote and the backslash.
var inString = plain

// validString returns the index after the valid JSON string whose opening quote is b[i], or -1.
func validString(b []byte, i int) int {
	j := i + 1
	for {
		for j+8 <= len(b) && !special8(binary.LittleEndian.Uint64(b[j:])) {
			j += 8
		}
		for j < len(b) && inString[b[j]] {
			j++
		}
		if j >= len(b) {
			return -1
		}
		switch c := b[j]; {
		case c == '"':
			return j + 1
		case c == '\\':
			if j+1 >= len(b) {
				return -1
			}
			switch b[j+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				j += 2
			case 'u':
				if j+6 > len(b) || !isHex(b[j+2]) || !isHex(b[j+3]) || !isHex(b[j+4]) || !isHex(b[j+5]) {
					return -1
				}
				j += 6
			default:
				return -1
			}
		case c < 0x20:
			return -1
		default:
			r, size := utf8.DecodeRune(b[j:])
			if r == utf8.RuneError && size == 1 {
				return -1
			}
			j += size
		}
	}
}

// special8 reports whether any of the 8 bytes of w does not stand for itself in a JSON
// string: a control byte, a quote, a backslash or a byte of a multi-byte character (each
// test is exact for "some byte is", which is all a skip needs).
func special8(w uint64) bool {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	quote, backslash := w^(ones*'"'), w^(ones*'\\')
	return ((w-ones*0x20)&^w|w|(quote-ones)&^quote|(backslash-ones)&^backslash)&highs != 0
}

func isHex(c byte) bool { return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F' }

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// validNumber returns the index after the JSON number at b[i], or -1.
func validNumber(b []byte, i int) int {
	digits := func(j int) int {
		if j >= len(b) || !isDigit(b[j]) {
			return -1
		}
		for j < len(b) && isDigit(b[j]) {
			j++
		}
		return j
	}
	j := i
	if j < len(b) && b[j] == '-' {
		j++
	}
	switch {
	case j >= len(b):
		return -1
	case b[j] == '0':
		j++
	default:
		if j = digits(j); j < 0 {
			return -1
		}
	}
	if j < len(b) && b[j] == '.' {
		if j = digits(j + 1); j < 0 {
			return -1
		}
	}
	if j < len(b) && (b[j] == 'e' || b[j] == 'E') {
		j++
		if j < len(b) && (b[j] == '+' || b[j] == '-') {
			j++
		}
		if j = digits(j); j < 0 {
			return -1
		}
	}
	return j
}

// fastAt recognises at b[i] an answer in one of FastAnswer's three shapes and returns where
// it ends; ok is false for anything else.
func fastAt(b []byte, i int) (typ string, delivery, key, payload []byte, hasKey bool, end int, ok bool) {
	const donePrefix, emitPrefix = `{"type":"done","delivery":"`, `{"type":"emit","delivery":"`
	rest := b[i:]
	if len(rest) < len(donePrefix)+2 {
		return "", nil, nil, nil, false, 0, false
	}
	switch string(rest[:len(donePrefix)]) {
	case donePrefix:
		id, after, ok := plainString(rest[len(donePrefix):])
		if !ok || len(after) == 0 || after[0] != '}' {
			return "", nil, nil, nil, false, 0, false
		}
		return TypeDone, id, nil, nil, false, len(b) - len(after) + 1, true
	case emitPrefix:
	default:
		if !bytes.HasPrefix(rest, []byte(statePrefix)) {
			return "", nil, nil, nil, false, 0, false
		}
		id, after, ok := plainString(rest[len(statePrefix):])
		if !ok || !bytes.HasPrefix(after, []byte(`,"state":`)) {
			return "", nil, nil, nil, false, 0, false
		}
		start := skipSpace(b, len(b)-len(after)+len(`,"state":`))
		stop := validEnd(b, start)
		if stop < 0 {
			return "", nil, nil, nil, false, 0, false
		}
		if end = skipSpace(b, stop); end >= len(b) || b[end] != '}' {
			return "", nil, nil, nil, false, 0, false
		}
		return TypeState, id, nil, b[start:stop], false, end + 1, true
	}
	id, rest, ok := plainString(rest[len(emitPrefix):])
	if !ok {
		return "", nil, nil, nil, false, 0, false
	}
	if bytes.HasPrefix(rest, []byte(`,"key":"`)) {
		if key, rest, ok = plainString(rest[len(`,"key":"`):]); !ok {
			return "", nil, nil, nil, false, 0, false
		}
		hasKey = true
	}
	if !bytes.HasPrefix(rest, []byte(`,"payload":`)) {
		return "", nil, nil, nil, false, 0, false
	}
	start := skipSpace(b, len(b)-len(rest)+len(`,"payload":`))
	stop := validEnd(b, start)
	if stop < 0 {
		return "", nil, nil, nil, false, 0, false
	}
	if end = skipSpace(b, stop); end >= len(b) || b[end] != '}' {
		return "", nil, nil, nil, false, 0, false
	}
	return TypeEmit, id, key, b[start:stop], hasKey, end + 1, true
}
