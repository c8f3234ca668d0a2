package viz

import (
	"strings"
	"testing"
)

// Malformed or hostile layouts are errors, never panics or huge images.
func TestPaintXDotBadInput(t *testing.T) {
	cases := map[string]string{
		"no bounding box": `digraph { a [_draw_="e 1 1 1 1 "]; }`,
		"huge":            `digraph { graph [bb="0,0,1e6,1e6"]; }`,
		"bad number":      `digraph { graph [bb="0,0,10,10"]; a [_draw_="e 1 x 1 1 "]; }`,
		"short string":    `digraph { graph [bb="0,0,10,10"]; a [_ldraw_="T 1 1 0 5 99 -ab "]; }`,
		"negative count":  `digraph { graph [bb="0,0,10,10"]; a [_draw_="P -3 "]; }`,
		"unknown op":      `digraph { graph [bb="0,0,10,10"]; a [_draw_="Z 1 "]; }`,
	}
	for name, src := range cases {
		if _, err := paintXDot([]byte(src)); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	ok := `digraph { graph [bb="0,0,100,50", _draw_="c 9 -#fffffe00 C 7 -#ffffff P 4 0 0 0 50 100 50 100 0 "];
	a [_draw_="S 6 -dashed c 7 -#000000 e 50 25 27 18 ", _ldraw_="F 14 11 -Times-Roman c 7 -#000000 T 50 21 0 7 1 -a "]; }`
	b, err := paintXDot([]byte(ok))
	if err != nil || !strings.HasPrefix(string(b), "\x89PNG") {
		t.Fatalf("a valid layout: %v", err)
	}
}
