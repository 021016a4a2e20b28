package schema

import (
	"encoding/binary"
	"math"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/twmb/avro"
)

// The Avro fast path writes the Avro JSON encoding straight from the binary value, with a
// plan made once per schema, byte for byte what the library writes of the value it decodes
// (decode to a Go value, then encode that as JSON), but for one thing: a map's entries come
// in the order they were written, where the library's come in Go's map order, which is
// unspecified. It gives up (and the record goes the library's way, which also makes every
// error) on what it does not cover: a union the library's JSON writer picks a branch of by
// trying (more than one complex branch; an enum, fixed, array or map beside anything but
// null; a record of one field), a one-entry map in a union, uuid on fixed, a map key given
// twice, an int out of range, a boolean byte other than 0 or 1,
// truncated or left-over bytes, nesting deeper than avMaxDepth, and a codec resolved to a
// pinned reader schema.

const avMaxDepth = 64

type avKind uint8

const (
	avNull avKind = iota
	avBoolean
	avInt
	avLong
	avFloat
	avDouble
	avString
	avBytes
	avFixed
	avEnum
	avArray
	avMap
	avRecord
	avUnion
)

// avNode is the plan of one schema node.
type avNode struct {
	kind     avKind
	size     int        // fixed
	full     string     // a named type's full name, its union tag
	symbols  [][]byte   // enum, quoted
	items    *avNode    // array items, map values
	fields   []avField  // record
	branches []avBranch // union
	bad      bool       // the fast path does not write it (met when a value has it)
}

type avField struct {
	name []byte // `"name":`
	node *avNode
}

type avBranch struct {
	tag  []byte // `{"tag":`, nil for null
	node *avNode
}

// avPlan makes the plan of a compiled schema; nil when the fast path cannot write it.
func avPlan(s *avro.Schema) (root *avNode) {
	defer func() {
		if recover() != nil {
			root = nil // Root re-parses the schema; a schema it cannot read goes the slow way
		}
	}()
	named := map[string]*avNode{}
	root = avBuild(s.Root(), "", named)
	if root.bad {
		return nil
	}
	return root
}

func avFullName(n *avro.SchemaNode, ns string) string {
	if strings.Contains(n.Name, ".") {
		return n.Name
	}
	if n.Namespace != "" {
		return n.Namespace + "." + n.Name
	}
	if ns != "" {
		return ns + "." + n.Name
	}
	return n.Name
}

func avBuild(n *avro.SchemaNode, ns string, named map[string]*avNode) *avNode {
	p := &avNode{}
	switch n.Type {
	case "null":
		p.kind = avNull
	case "boolean":
		p.kind = avBoolean
	case "int":
		p.kind = avInt
	case "long":
		p.kind = avLong
	case "float":
		p.kind = avFloat
	case "double":
		p.kind = avDouble
	case "string":
		p.kind = avString
	case "bytes":
		p.kind = avBytes
	case "fixed":
		p.kind, p.size = avFixed, n.Size
		p.bad = n.LogicalType == "uuid"
		p.full = avFullName(n, ns)
		named[p.full] = p
	case "enum":
		p.kind = avEnum
		for _, s := range n.Symbols {
			p.symbols = append(p.symbols, avAppendString(nil, s))
		}
		p.full = avFullName(n, ns)
		named[p.full] = p
	case "array":
		p.kind = avArray
		p.items = avBuild(n.Items, ns, named)
	case "map":
		p.kind = avMap
		p.items = avBuild(n.Values, ns, named)
	case "record", "error":
		p.kind = avRecord
		p.full = avFullName(n, ns)
		named[p.full] = p
		inner := p.full[:max(0, strings.LastIndexByte(p.full, '.'))]
		for i := range n.Fields {
			f := &n.Fields[i]
			fn := avBuild(&f.Type, inner, named)
			p.fields = append(p.fields, avField{name: append(avAppendString(nil, f.Name), ':'), node: fn})
		}
	case "union":
		p.kind = avUnion
		avUnionPlan(p, n, ns, named)
	default:
		// A reference to a named type defined before it.
		ref := named[n.Type]
		if ref == nil && !strings.Contains(n.Type, ".") && ns != "" {
			ref = named[ns+"."+n.Type]
		}
		if ref == nil {
			return &avNode{bad: true}
		}
		return ref
	}
	return p
}

// avUnionPlan plans a union where the library's JSON writer picks the branch the value
// was read from by its Go type (a primitive: one branch of each kind), or by elimination
// (null and at most one complex branch); anything else is bad.
func avUnionPlan(p *avNode, n *avro.SchemaNode, ns string, named map[string]*avNode) {
	complexes := 0
	var complexKind avKind
	for i := range n.Branches {
		b := &n.Branches[i]
		bn := avBuild(b, ns, named)
		tag := b.Type
		if bn.full != "" {
			tag = bn.full
		}
		br := avBranch{node: bn}
		if bn.kind != avNull {
			br.tag = append(append([]byte{'{'}, avAppendString(nil, tag)...), ':')
		}
		p.branches = append(p.branches, br)
		switch bn.kind {
		case avFixed, avEnum, avArray, avMap, avRecord:
			complexes++
			complexKind = bn.kind
			if bn.kind == avRecord && len(bn.fields) == 1 {
				p.bad = true // a one-field map may read as a tagged union
			}
		}
	}
	nonNull := 0
	for _, b := range p.branches {
		if b.node.kind != avNull {
			nonNull++
		}
	}
	switch {
	case complexes > 1:
		p.bad = true
	case complexes == 1 && complexKind != avRecord && nonNull > 1:
		p.bad = true
	}
}

type avWriter struct {
	out  []byte
	b    []byte
	i    int
	keys [][]byte
}

var avWriters = sync.Pool{New: func() any { return &avWriter{} }}

// avroFast writes payload's Avro JSON with plan p, or reports false.
func avroFast(p *avNode, payload []byte) ([]byte, bool) {
	w := avWriters.Get().(*avWriter)
	w.out = make([]byte, 0, 2*len(payload)+64)
	w.b, w.i = payload, 0
	ok := w.value(p, 0) && w.i == len(payload)
	out := w.out
	w.out, w.b = nil, nil
	w.keys = w.keys[:0]
	avWriters.Put(w)
	return out, ok
}

// long reads a zig-zag varint of at most 10 bytes.
func (w *avWriter) long() (int64, bool) {
	var u uint64
	for s := uint(0); s < 70; s += 7 {
		if w.i >= len(w.b) {
			return 0, false
		}
		c := w.b[w.i]
		w.i++
		if s == 63 && c > 1 {
			return 0, false
		}
		u |= uint64(c&0x7f) << s
		if c < 0x80 {
			return int64(u>>1) ^ -int64(u&1), true
		}
	}
	return 0, false
}

// bytes reads a length and that many bytes.
func (w *avWriter) bytes() ([]byte, bool) {
	n, ok := w.long()
	if !ok || n < 0 || n > int64(len(w.b)-w.i) {
		return nil, false
	}
	v := w.b[w.i : w.i+int(n)]
	w.i += int(n)
	return v, true
}

func (w *avWriter) value(p *avNode, depth int) bool {
	if depth > avMaxDepth || p.bad && p.kind != avUnion {
		return false
	}
	switch p.kind {
	case avNull:
		w.out = append(w.out, "null"...)
	case avBoolean:
		if w.i >= len(w.b) || w.b[w.i] > 1 {
			return false
		}
		w.out = strconv.AppendBool(w.out, w.b[w.i] == 1)
		w.i++
	case avInt, avLong:
		v, ok := w.long()
		if !ok || p.kind == avInt && (v < math.MinInt32 || v > math.MaxInt32) {
			return false
		}
		w.out = strconv.AppendInt(w.out, v, 10)
	case avFloat:
		if len(w.b)-w.i < 4 {
			return false
		}
		f := math.Float32frombits(binary.LittleEndian.Uint32(w.b[w.i:]))
		w.i += 4
		w.out = avAppendFloat(w.out, float64(f), 32)
	case avDouble:
		if len(w.b)-w.i < 8 {
			return false
		}
		f := math.Float64frombits(binary.LittleEndian.Uint64(w.b[w.i:]))
		w.i += 8
		w.out = avAppendFloat(w.out, f, 64)
	case avString:
		v, ok := w.bytes()
		if !ok {
			return false
		}
		w.out = avAppendString(w.out, string(v))
	case avBytes:
		v, ok := w.bytes()
		if !ok {
			return false
		}
		w.out = avAppendBytes(w.out, v)
	case avFixed:
		if len(w.b)-w.i < p.size {
			return false
		}
		w.out = avAppendBytes(w.out, w.b[w.i:w.i+p.size])
		w.i += p.size
	case avEnum:
		v, ok := w.long()
		if !ok || v < 0 || v >= int64(len(p.symbols)) {
			return false
		}
		w.out = append(w.out, p.symbols[v]...)
	case avArray, avMap:
		return w.blocks(p, depth)
	case avRecord:
		w.out = append(w.out, '{')
		for j := range p.fields {
			if j > 0 {
				w.out = append(w.out, ',')
			}
			w.out = append(w.out, p.fields[j].name...)
			if !w.value(p.fields[j].node, depth+1) {
				return false
			}
		}
		w.out = append(w.out, '}')
	case avUnion:
		v, ok := w.long()
		if !ok || v < 0 || v >= int64(len(p.branches)) {
			return false
		}
		br := &p.branches[v]
		if br.tag == nil {
			// Null is written null whatever the union's other branches.
			w.out = append(w.out, "null"...)
			return true
		}
		if p.bad {
			return false
		}
		w.out = append(w.out, br.tag...)
		if br.node.kind == avMap && !w.mapOfMany() {
			return false
		}
		if !w.value(br.node, depth+1) {
			return false
		}
		w.out = append(w.out, '}')
	default:
		return false
	}
	return true
}

// mapOfMany says whether the map at the reader holds other than exactly one entry (a one-entry
// map in a union may read as a tagged union to the library's writer), leaving the reader.
func (w *avWriter) mapOfMany() bool {
	at := w.i
	n, ok := w.long()
	w.i = at
	return ok && n != 1 && n != -1
}

// blocks writes an array's or a map's blocks.
func (w *avWriter) blocks(p *avNode, depth int) bool {
	isMap := p.kind == avMap
	open, close := byte('['), byte(']')
	if isMap {
		open, close = '{', '}'
	}
	w.out = append(w.out, open)
	keys := len(w.keys)
	defer func() { w.keys = w.keys[:keys] }()
	first := true
	for {
		n, ok := w.long()
		if !ok {
			return false
		}
		if n == 0 {
			break
		}
		if n < 0 {
			if n == math.MinInt64 {
				return false
			}
			n = -n
			if _, ok := w.long(); !ok { // the block's size in bytes
				return false
			}
		}
		if n > int64(len(w.b)-w.i) {
			return false
		}
		for ; n > 0; n-- {
			if !first {
				w.out = append(w.out, ',')
			}
			first = false
			if isMap {
				k, ok := w.bytes()
				if !ok {
					return false
				}
				for _, seen := range w.keys[keys:] {
					if string(seen) == string(k) {
						return false // the library keeps the last value
					}
				}
				w.keys = append(w.keys, k)
				w.out = append(avAppendString(w.out, string(k)), ':')
			}
			if !w.value(p.items, depth+1) {
				return false
			}
		}
	}
	w.out = append(w.out, close)
	return true
}

// avAppendString writes s as the library does: '"', '\\' and the control characters with
// JSON's short escapes where it has them, the other control characters and U+2028/U+2029 as
// \u escapes (lower case), everything else as it is.
func avAppendString(out []byte, s string) []byte {
	out = append(out, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				out = append(out, c) // the usual case, without a call
			} else {
				out = avAppendEscape(out, c)
			}
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			out = utf8.AppendRune(out, utf8.RuneError)
		case r == '\u2028' || r == '\u2029':
			out = append(out, '\\', 'u', '2', '0', '2', avHex[byte(r)&0xf])
		default:
			out = append(out, s[i:i+n]...)
		}
		i += n
	}
	return append(out, '"')
}

// avAppendBytes writes bytes as code points 0-255: printable ASCII as it is (but '"' and
// '\\'), JSON's short escapes, \u00xx for the rest.
func avAppendBytes(out, b []byte) []byte {
	out = append(out, '"')
	for _, c := range b {
		if c >= 0x20 && c <= 0x7e && c != '"' && c != '\\' {
			out = append(out, c)
		} else {
			out = avAppendEscape(out, c)
		}
	}
	return append(out, '"')
}

const avHex = "0123456789abcdef"

// avAppendEscape writes the byte c escaped as both writers above escape it: '"' and '\\'
// after a backslash, JSON's short escapes where it has them, \u00xx for the rest.
func avAppendEscape(out []byte, c byte) []byte {
	switch c {
	case '"', '\\':
		return append(out, '\\', c)
	case '\b':
		return append(out, '\\', 'b')
	case '\t':
		return append(out, '\\', 't')
	case '\n':
		return append(out, '\\', 'n')
	case '\f':
		return append(out, '\\', 'f')
	case '\r':
		return append(out, '\\', 'r')
	}
	return append(out, '\\', 'u', '0', '0', avHex[c>>4], avHex[c&0xf])
}

// avAppendFloat writes NaN and the infinities as strings, else the shortest form.
func avAppendFloat(out []byte, f float64, size int) []byte {
	switch {
	case math.IsNaN(f):
		return append(out, `"NaN"`...)
	case math.IsInf(f, 1):
		return append(out, `"Infinity"`...)
	case math.IsInf(f, -1):
		return append(out, `"-Infinity"`...)
	}
	return strconv.AppendFloat(out, f, 'g', -1, size)
}
