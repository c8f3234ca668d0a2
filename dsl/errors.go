package dsl

import (
	"fmt"
	"strings"
)

// Error is a fault in a model or data file, with its position.
type Error struct {
	Pos Pos
	Msg string
}

func (e *Error) Error() string { return e.Pos.String() + ": " + e.Msg }

// Errorf builds an Error.
func Errorf(pos Pos, format string, args ...any) *Error {
	return &Error{Pos: pos, Msg: fmt.Sprintf(format, args...)}
}

// ErrorList is several errors found in one pass.
type ErrorList []*Error

func (l ErrorList) Error() string {
	var b strings.Builder
	for i, e := range l {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(e.Error())
	}
	return b.String()
}

// Err returns nil for an empty list.
func (l ErrorList) Err() error {
	if len(l) == 0 {
		return nil
	}
	return l
}

// attrAliases are other frameworks' names of psgraph's attributes.
var attrAliases = map[string]string{
	"learning_rate": "lr", "learningrate": "lr", "alpha": "lr",
	"epsilon": "eps", "weightdecay": "weight_decay", "wd": "weight_decay",
	"betas": "beta1", "beta_1": "beta1", "beta_2": "beta2",
	"rho": "decay", "keepdims": "keepdim",
}

// suggestAttr is suggest for an attribute name: an alias from another
// framework (learning_rate for lr) first, when the op has that attribute.
func suggestAttr(name string, candidates []string) string {
	if a, ok := attrAliases[strings.ToLower(name)]; ok {
		for _, c := range candidates {
			if c == a {
				return fmt.Sprintf(" (did you mean %q?)", a)
			}
		}
	}
	return suggest(name, candidates)
}

// suggest returns ` (did you mean "x"?)` for the closest candidate, or "".
func suggest(name string, candidates []string) string {
	best, bestD := "", 1<<30
	for _, c := range candidates {
		d := EditDistance(strings.ToLower(name), strings.ToLower(c))
		if d < bestD || (d == bestD && c < best) {
			best, bestD = c, d
		}
	}
	if best == "" || bestD > max(2, len(name)/3) {
		return ""
	}
	return fmt.Sprintf(" (did you mean %q?)", best)
}

// EditDistance is the Levenshtein distance between a and b (bytes), for
// "did you mean" suggestions here and in the command line.
func EditDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
