package dsl

import (
	"fmt"
	"strconv"
	"strings"
	"unicode"
)

// evalExpr evaluates an attribute expression over hyper-parameters:
// numbers, $names, + - * / and parentheses, e.g. "1 - $beta1".
func evalExpr(src string, vars map[string]float64) (float64, error) {
	p := &exprParser{src: src, vars: vars}
	v, err := p.sum()
	if err != nil {
		return 0, err
	}
	p.space()
	if p.i != len(p.src) {
		return 0, fmt.Errorf("unexpected %q in expression %q", p.src[p.i:], src)
	}
	return v, nil
}

type exprParser struct {
	src  string
	i    int
	vars map[string]float64
}

func (p *exprParser) space() {
	for p.i < len(p.src) && p.src[p.i] == ' ' {
		p.i++
	}
}

func (p *exprParser) sum() (float64, error) { return p.chain(p.product, '+', '-') }

func (p *exprParser) product() (float64, error) { return p.chain(p.unary, '*', '/') }

// chain parses operands (by next) joined by the operators a and b of one
// precedence level, left to right.
func (p *exprParser) chain(next func() (float64, error), a, b byte) (float64, error) {
	v, err := next()
	for err == nil {
		p.space()
		if p.i >= len(p.src) || (p.src[p.i] != a && p.src[p.i] != b) {
			break
		}
		op := p.src[p.i]
		p.i++
		var w float64
		w, err = next()
		switch op {
		case '+':
			v += w
		case '-':
			v -= w
		case '*':
			v *= w
		case '/':
			v /= w
		}
	}
	return v, err
}

func (p *exprParser) unary() (float64, error) {
	p.space()
	if p.i < len(p.src) && p.src[p.i] == '-' {
		p.i++
		v, err := p.unary()
		return -v, err
	}
	return p.atom()
}

func (p *exprParser) atom() (float64, error) {
	p.space()
	if p.i >= len(p.src) {
		return 0, fmt.Errorf("expression %q ends early", p.src)
	}
	switch c := p.src[p.i]; {
	case c == '(':
		p.i++
		v, err := p.sum()
		p.space()
		if err == nil && (p.i >= len(p.src) || p.src[p.i] != ')') {
			err = fmt.Errorf("missing ) in expression %q", p.src)
		}
		p.i++
		return v, err
	case c == '$':
		j := p.i + 1
		for j < len(p.src) && (unicode.IsLetter(rune(p.src[j])) || unicode.IsDigit(rune(p.src[j])) || p.src[j] == '_') {
			j++
		}
		name := p.src[p.i+1 : j]
		p.i = j
		v, ok := p.vars[name]
		if !ok {
			names := make([]string, 0, len(p.vars))
			for k := range p.vars {
				names = append(names, k)
			}
			return 0, fmt.Errorf("unknown hyper-parameter $%s%s", name, suggest(name, names))
		}
		return v, nil
	default:
		j := p.i
		for j < len(p.src) && strings.ContainsRune("0123456789.eE+-", rune(p.src[j])) {
			if (p.src[j] == '+' || p.src[j] == '-') && j > p.i && p.src[j-1] != 'e' && p.src[j-1] != 'E' {
				break
			}
			j++
		}
		v, err := strconv.ParseFloat(p.src[p.i:j], 64)
		if err != nil {
			return 0, fmt.Errorf("bad number %q in expression %q", p.src[p.i:j], p.src)
		}
		p.i = j
		return v, nil
	}
}
