package settings

import (
	"strconv"
	"strings"
	"time"
)

// Row is one setting of a side's table, declared once: its variable, its default as the tables
// write it and what it means ([Var]), and, for a setting read into a field of the side's config
// C, how that field takes its default, is read and is bounded. The side's [Table] of rows then
// builds its defaults, fills the zero fields of a hand-built config, reads the environment,
// and prints `-h` and the docs table; a new setting is one row.
type Row[C any] struct {
	Var
	def  func(*C)          // sets the default
	zero func(*C)          // sets the default where the field is zero; nil: a zero is kept
	read func(*Reader, *C) // reads the variable, keeping the field's value when unset
}

// Doc returns the row with the docs table's text for it (the -h line stays Meaning).
func (r Row[C]) Doc(doc string) Row[C] { r.Var.Doc = doc; return r }

// Shown returns the row with its default written as def in -h and the docs (a default that
// another setting derives, or that a unit says better).
func (r Row[C]) Shown(def string) Row[C] { r.Default, r.Literal = def, false; return r }

// Code returns the row with its default written as a value (in backticks in the docs).
func (r Row[C]) Code() Row[C] { r.Literal = true; return r }

// Then returns the row with then run after its variable is read (set or not): a value the
// variable writes one way and the config holds another.
func (r Row[C]) Then(then func(*C)) Row[C] {
	read := r.read
	r.read = func(rd *Reader, c *C) {
		if read != nil {
			read(rd, c)
		}
		then(c)
	}
	return r
}

// KeepZero returns the row with a zero field of a hand-built config kept as it is (a port that
// is required, a file that is not written when empty), not given the default.
func (r Row[C]) KeepZero() Row[C] { r.zero = nil; return r }

// Table is a side's settings, in the order -h and the docs list them.
type Table[C any] []Row[C]

// Defaults sets every row's default in c.
func (t Table[C]) Defaults(c *C) {
	for _, r := range t {
		if r.def != nil {
			r.def(c)
		}
	}
}

// FillZero gives the zero fields of a hand-built c their rows' defaults.
func (t Table[C]) FillZero(c *C) {
	for _, r := range t {
		if r.zero != nil {
			r.zero(c)
		}
	}
}

// Read reads every row's variable into c through rd, keeping c's value where it is unset; the
// problems are rd's.
func (t Table[C]) Read(rd *Reader, c *C) {
	for _, r := range t {
		if r.read != nil {
			r.read(rd, c)
		}
	}
}

// Vars returns the table's variables, for -h.
func (t Table[C]) Vars() []Var {
	vars := make([]Var, len(t))
	for i, r := range t {
		vars[i] = r.Var
	}
	return vars
}

// Markdown writes vars as the docs' table: variable, default, meaning (Doc, else Meaning).
func Markdown(vars []Var) string {
	var b strings.Builder
	b.WriteString("| variable | default | meaning |\n| --- | --- | --- |\n")
	for _, v := range vars {
		def := v.Default
		if v.Literal {
			def = "`" + def + "`"
		}
		doc := v.Doc
		if doc == "" {
			doc = v.Meaning
		}
		b.WriteString("| `" + v.Name + "` | " + def + " | " + doc + " |\n")
	}
	return b.String()
}

// Info is a row read elsewhere (a required value, a binding, a file): listed in -h and the
// docs, its default written as def.
func Info[C any](name, def, meaning string) Row[C] {
	return Row[C]{Var: Var{Name: name, Default: def, Meaning: meaning}}
}

// Custom is a row whose field is read by read (which reports its own problems through the
// Reader); def, when not nil, sets its default, and a zero field is kept.
func Custom[C any](name, shown, meaning string, def func(*C), read func(*Reader, *C)) Row[C] {
	return Row[C]{Var: Var{Name: name, Default: shown, Meaning: meaning, Literal: shown != "—"}, def: def, read: read}
}

// typed builds the row of a field of type T with a default, a zero filled in and a reader.
func typed[C any, T comparable](name string, field func(*C) *T, def T, shown, meaning string, read func(*Reader, string, T) T) Row[C] {
	var zero T
	return Row[C]{
		Var: Var{Name: name, Default: shown, Meaning: meaning, Literal: true},
		def: func(c *C) { *field(c) = def },
		zero: func(c *C) {
			if *field(c) == zero {
				*field(c) = def
			}
		},
		read: func(r *Reader, c *C) { *field(c) = read(r, name, *field(c)) },
	}
}

// String is a row of a text: unset, def.
func String[C any](name string, field func(*C) *string, def, meaning string) Row[C] {
	shown := def
	if def == "" {
		shown = "—"
	}
	row := typed(name, field, def, shown, meaning, (*Reader).String)
	row.Literal = def != ""
	return row
}

// Port is a row of a TCP port (1 to 65535).
func Port[C any](name string, field func(*C) *int, def int, meaning string) Row[C] {
	return typed(name, field, def, strconv.Itoa(def), meaning, (*Reader).Port)
}

// Duration is a row of a duration of at least min (0 takes 0; any min above 0 refuses it).
func Duration[C any](name string, field func(*C) *time.Duration, def, min time.Duration, meaning string) Row[C] {
	return typed(name, field, def, FormatDuration(def), meaning, func(r *Reader, name string, d time.Duration) time.Duration {
		return r.Duration(name, d, min)
	})
}

// Size is a row of a size in bytes from min to max (no upper bound when max is 0).
func Size[C any, N ~int | ~int64](name string, field func(*C) *N, def, min, max N, meaning string) Row[C] {
	return typed(name, field, def, FormatSize(int64(def)), meaning, func(r *Reader, name string, n N) N {
		return N(r.Size(name, int64(n), int64(min), int64(max)))
	})
}

// Int is a row of a whole number of at least min.
func Int[C any](name string, field func(*C) *int, def, min int, meaning string) Row[C] {
	return typed(name, field, def, strconv.Itoa(def), meaning, func(r *Reader, name string, n int) int {
		return r.Int(name, n, min)
	})
}

// Uint is a row of a whole number from 0 up.
func Uint[C any](name string, field func(*C) *uint64, def uint64, meaning string) Row[C] {
	return typed(name, field, def, strconv.FormatUint(def, 10), meaning, (*Reader).Uint)
}

// Bool is a row of true or false.
func Bool[C any](name string, field func(*C) *bool, def bool, meaning string) Row[C] {
	return typed(name, field, def, strconv.FormatBool(def), meaning, (*Reader).Bool).KeepZero()
}

// Enum is a row of one of a set of words, read by parse, whose error names the variable and
// the words it takes.
func Enum[C any, T ~string](name string, field func(*C) *T, def T, meaning string, parse func(string) (T, error)) Row[C] {
	return typed(name, field, def, string(def), meaning, func(r *Reader, name string, v T) T {
		s, ok := r.Lookup(name)
		if !ok {
			return v
		}
		t, err := parse(s)
		if err != nil {
			r.Badf("%v", err)
			return v
		}
		return t
	})
}
