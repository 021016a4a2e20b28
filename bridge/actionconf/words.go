package actionconf

import (
	"fmt"
	"strings"
)

// The quoting rules of an action config line given as one string (a file or MILLRACE_ACTION),
// a small subset of the POSIX shell's, with no expansion of any kind:
//
//   - blanks (space, tab, CR, newline) separate words;
//   - '…' keeps everything inside literally, backslashes included;
//   - "…" keeps everything inside literally except \" and \\, which stand for " and \;
//   - outside quotes a backslash keeps the next character literally, and a backslash at the end
//     of a line joins the next line to it;
//   - # at the start of a word begins a comment that runs to the end of the line;
//   - quoted and unquoted parts that touch make one word ('a'"b"c is abc), and '' is an empty
//     word;
//   - $, `, *, ~, ;, | and the like mean nothing: there is no shell.

// logicalLine is one line of words and the physical line it starts on (from 1).
type logicalLine struct {
	words []string
	line  int
}

// splitLines splits s into logical lines of words by the quoting rules above. Lines with no
// words (blank or comment only) are left out.
func splitLines(s string) ([]logicalLine, error) {
	var (
		lines   []logicalLine
		words   []string
		word    strings.Builder
		inWord  bool // a word has begun, even an empty one ('')
		line    = 1  // the physical line at i
		start   = 0  // the physical line the current logical line starts on
		endWord = func() {
			if inWord {
				words = append(words, word.String())
				word.Reset()
				inWord = false
			}
		}
		endLine = func() {
			endWord()
			if len(words) > 0 {
				lines = append(lines, logicalLine{words: words, line: start})
			}
			words = nil
			start = 0
		}
		begin = func() {
			if start == 0 {
				start = line
			}
			inWord = true
		}
	)
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '\n':
			endLine()
			line++
		case c == ' ' || c == '\t' || c == '\r':
			endWord()
		case c == '#' && !inWord:
			for i+1 < len(s) && s[i+1] != '\n' {
				i++
			}
		case c == '\\':
			if i+1 == len(s) {
				return nil, &lineError{Index: -1, Message: fmt.Sprintf("line %d ends in a lone backslash: write \\\\ for a backslash, or continue the line on the next one", line)}
			}
			i++
			if s[i] == '\n' { // a continued line
				line++
				continue
			}
			begin()
			word.WriteByte(s[i])
		case c == '\'':
			begin()
			end := strings.IndexByte(s[i+1:], '\'')
			if end < 0 {
				return nil, &lineError{Index: -1, Message: fmt.Sprintf("line %d: the quote ' opened there is never closed: add the closing '", line)}
			}
			part := s[i+1 : i+1+end]
			line += strings.Count(part, "\n")
			word.WriteString(part)
			i += end + 1
		case c == '"':
			begin()
			opened := line
			closed := false
			for i++; i < len(s); i++ {
				c := s[i]
				if c == '"' {
					closed = true
					break
				}
				if c == '\\' && i+1 < len(s) && (s[i+1] == '"' || s[i+1] == '\\') {
					i++
					c = s[i]
				}
				if c == '\n' {
					line++
				}
				word.WriteByte(c)
			}
			if !closed {
				return nil, &lineError{Index: -1, Message: fmt.Sprintf("line %d: the quote \" opened there is never closed: add the closing \"", opened)}
			}
		default:
			begin()
			word.WriteByte(c)
		}
	}
	endLine()
	return lines, nil
}

// Split splits an action config line given as one string into its words, by the quoting rules
// documented in docs/action-config.md (single quotes, double quotes with \" and \\, backslash, # comments,
// no expansion). Newlines separate words like any blank; use [ParseString] to hold a text to
// exactly one line.
func Split(s string) ([]string, error) {
	lines, err := splitLines(s)
	if err != nil {
		return nil, err
	}
	var words []string
	for _, l := range lines {
		words = append(words, l.words...)
	}
	return words, nil
}

// quote returns word written so that [Split] reads it back as this one word: unchanged when it
// holds nothing special, else in single quotes (a ' inside written as '\”).
func quote(word string) string {
	if word == "" {
		return "''"
	}
	plain := true
	for i := 0; i < len(word); i++ {
		switch c := word[i]; c {
		case ' ', '\t', '\r', '\n', '\'', '"', '\\', '#', '$', '`', ';', '&', '|', '<', '>', '(', ')', '*', '?', '[', '~', '{', '}':
			plain = false
		}
	}
	if plain {
		return word
	}
	return "'" + strings.ReplaceAll(word, "'", `'\''`) + "'"
}

// Join writes words as one line that [Split] reads back as the same words.
func Join(words []string) string {
	quoted := make([]string, len(words))
	for i, w := range words {
		quoted[i] = quote(w)
	}
	return strings.Join(quoted, " ")
}
