package viz

import (
	"bytes"
	"context"
	"fmt"
	"image/color"
	"regexp"
	"strconv"
	"strings"

	"github.com/fogleman/gg"
	"github.com/goccy/go-graphviz"
	"github.com/golang/freetype/truetype"
	"golang.org/x/image/font"
	"golang.org/x/image/font/gofont/goregular"
)

// pngScale is pixels per point of the PNG: 96 dpi.
const pngScale = 96.0 / 72.0

// RenderPNG lays out DOT text in-process and paints it as a PNG.
//
// go-graphviz's own PNG renderer loses every stroke (edges, outlines), so
// this asks the in-process Graphviz for xdot, the layout as drawing
// operations, and paints those with gg. It covers what psgraph's DOT uses:
// ellipses, polygons, polylines, Béziers, text, colours and line styles.
func RenderPNG(ctx context.Context, dot []byte) ([]byte, error) {
	xdot, err := render(ctx, dot, graphviz.Format("xdot"))
	if err != nil {
		return nil, err
	}
	return paintXDot(xdot)
}

var (
	bbAttr   = regexp.MustCompile(`bb="([-0-9.e]+),([-0-9.e]+),([-0-9.e]+),([-0-9.e]+)"`)
	drawAttr = regexp.MustCompile(`_(?:draw|ldraw|hdraw|tdraw|hldraw|tldraw)_="((?:[^"\\]|\\.|\\\n)*)"`)
)

func unquoteDOT(s string) string {
	s = strings.ReplaceAll(s, "\\\n", "")
	return strings.NewReplacer(`\"`, `"`, `\\`, `\`).Replace(s)
}

func paintXDot(xdot []byte) ([]byte, error) {
	m := bbAttr.FindSubmatch(xdot)
	if m == nil {
		return nil, fmt.Errorf("the layout has no bounding box")
	}
	var bb [4]float64
	for i := range bb {
		bb[i], _ = strconv.ParseFloat(string(m[i+1]), 64)
	}
	// Graphviz's default pad: 4 points around the bounding box, as in its SVG
	const pad = 4
	bb[0], bb[1], bb[2], bb[3] = bb[0]-pad, bb[1]-pad, bb[2]+pad, bb[3]+pad
	w, h := bb[2]-bb[0], bb[3]-bb[1]
	if w <= 0 || h <= 0 || w*h*pngScale*pngScale > 50e6 {
		return nil, fmt.Errorf("the layout is %.0fx%.0f points, too large for a PNG; write .svg or use --collapse-backward / --comm-only", w, h)
	}
	c := gg.NewContext(int(w*pngScale)+1, int(h*pngScale)+1)
	c.SetColor(color.White)
	c.Clear()
	ft, err := truetype.Parse(goregular.TTF)
	if err != nil {
		return nil, err
	}
	p := &painter{c: c, ft: ft, faces: map[float64]font.Face{}, x0: bb[0], top: bb[3],
		pen: color.Black, fill: color.Black}
	for _, sm := range drawAttr.FindAllSubmatch(xdot, -1) {
		if err := p.run(unquoteDOT(string(sm[1]))); err != nil {
			return nil, fmt.Errorf("drawing the layout: %w", err)
		}
	}
	var out bytes.Buffer
	if err := c.EncodePNG(&out); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

type painter struct {
	c         *gg.Context
	ft        *truetype.Font
	faces     map[float64]font.Face
	x0, top   float64
	pen, fill color.Color
	fontSize  float64
	lineWidth float64
	dash      []float64
	src       string
	pos       int
}

func (p *painter) x(v float64) float64 { return (v - p.x0) * pngScale }
func (p *painter) y(v float64) float64 { return (p.top - v) * pngScale }

func (p *painter) word() string {
	for p.pos < len(p.src) && p.src[p.pos] == ' ' {
		p.pos++
	}
	start := p.pos
	for p.pos < len(p.src) && p.src[p.pos] != ' ' {
		p.pos++
	}
	return p.src[start:p.pos]
}

func (p *painter) num() (float64, error) {
	w := p.word()
	f, err := strconv.ParseFloat(w, 64)
	if err != nil {
		return 0, fmt.Errorf("xdot: %q is not a number", w)
	}
	return f, nil
}

// str reads an xdot string: a byte count, a '-', then that many bytes.
func (p *painter) str() (string, error) {
	n, err := p.num()
	if err != nil {
		return "", err
	}
	for p.pos < len(p.src) && p.src[p.pos] == ' ' {
		p.pos++
	}
	if p.pos >= len(p.src) || p.src[p.pos] != '-' || p.pos+1+int(n) > len(p.src) || n < 0 {
		return "", fmt.Errorf("xdot: bad string at %d", p.pos)
	}
	s := p.src[p.pos+1 : p.pos+1+int(n)]
	p.pos += 1 + int(n)
	return s, nil
}

func (p *painter) points() ([][2]float64, error) {
	n, err := p.num()
	if err != nil {
		return nil, err
	}
	if n < 0 || n > 1e6 {
		return nil, fmt.Errorf("xdot: %v points", n)
	}
	pts := make([][2]float64, int(n))
	for i := range pts {
		if pts[i][0], err = p.num(); err != nil {
			return nil, err
		}
		if pts[i][1], err = p.num(); err != nil {
			return nil, err
		}
	}
	return pts, nil
}

func (p *painter) stroke(path func()) {
	if isNone(p.pen) {
		return
	}
	p.c.SetColor(p.pen)
	p.c.SetLineWidth(max(p.lineWidth, 1) * pngScale)
	p.c.SetDash(p.dash...)
	path()
	p.c.Stroke()
}

func (p *painter) fillPath(path func()) {
	if isNone(p.fill) {
		return
	}
	p.c.SetColor(p.fill)
	path()
	p.c.Fill()
}

func (p *painter) run(ops string) error {
	p.src, p.pos = ops, 0
	p.lineWidth, p.dash = 1, nil
	for {
		op := p.word()
		if op == "" {
			return nil
		}
		var err error
		switch op {
		case "E", "e":
			err = p.ellipse(op)
		case "P", "p", "L", "B", "b":
			err = p.polygon(op)
		case "T":
			err = p.text()
		case "F":
			var size float64
			if size, err = p.num(); err == nil {
				if _, err = p.str(); err == nil {
					p.fontSize = size
				}
			}
		case "C", "c":
			var s string
			if s, err = p.str(); err == nil {
				if op == "C" {
					p.fill = parseColor(s)
				} else {
					p.pen = parseColor(s)
				}
			}
		case "S":
			var s string
			if s, err = p.str(); err == nil {
				p.style(s)
			}
		case "t":
			_, err = p.num()
		case "I":
			if _, err = p.nums(4); err == nil {
				_, err = p.str()
			}
		default:
			return fmt.Errorf("xdot: unknown operation %q", op)
		}
		if err != nil {
			return err
		}
	}
}

// nums reads n numbers.
func (p *painter) nums(n int) ([]float64, error) {
	v := make([]float64, n)
	for i := range v {
		f, err := p.num()
		if err != nil {
			return nil, err
		}
		v[i] = f
	}
	return v, nil
}

// ellipse draws an E (filled) or e (outlined) ellipse.
func (p *painter) ellipse(op string) error {
	v, err := p.nums(4)
	if err != nil {
		return err
	}
	path := func() { p.c.DrawEllipse(p.x(v[0]), p.y(v[1]), v[2]*pngScale, v[3]*pngScale) }
	if op == "E" {
		p.fillPath(path)
	}
	p.stroke(path)
	return nil
}

// polygon draws a P/p polygon, an L polyline or a B/b B-spline.
func (p *painter) polygon(op string) error {
	pts, err := p.points()
	if err != nil || len(pts) == 0 {
		return err
	}
	path := func() {
		p.c.NewSubPath()
		p.c.MoveTo(p.x(pts[0][0]), p.y(pts[0][1]))
		if op == "B" || op == "b" {
			for i := 1; i+2 < len(pts); i += 3 {
				p.c.CubicTo(p.x(pts[i][0]), p.y(pts[i][1]), p.x(pts[i+1][0]), p.y(pts[i+1][1]), p.x(pts[i+2][0]), p.y(pts[i+2][1]))
			}
		} else {
			for _, pt := range pts[1:] {
				p.c.LineTo(p.x(pt[0]), p.y(pt[1]))
			}
		}
		if op != "L" && op != "B" {
			p.c.ClosePath()
		}
	}
	if op == "P" || op == "b" {
		p.fillPath(path)
	}
	p.stroke(path)
	return nil
}

// text draws a T text operation.
func (p *painter) text() error {
	v, err := p.nums(4)
	if err != nil {
		return err
	}
	text, err := p.str()
	if err != nil {
		return err
	}
	p.c.SetFontFace(p.face())
	p.c.SetColor(p.pen)
	p.c.DrawStringAnchored(text, p.x(v[0]), p.y(v[1]), (v[2]+1)/2, 0)
	return nil
}

// style applies an S style operation.
func (p *painter) style(s string) {
	switch {
	case s == "dashed":
		p.dash = []float64{5 * pngScale, 3 * pngScale}
	case s == "dotted":
		p.dash = []float64{1 * pngScale, 3 * pngScale}
	case s == "solid":
		p.dash = nil
	case s == "bold":
		p.lineWidth = 2
	case strings.HasPrefix(s, "setlinewidth("):
		if f, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimPrefix(s, "setlinewidth("), ")"), 64); err == nil {
			p.lineWidth = f
		}
	}
}

func (p *painter) face() font.Face {
	size := p.fontSize
	if size <= 0 {
		size = 14
	}
	if f, ok := p.faces[size]; ok {
		return f
	}
	f := truetype.NewFace(p.ft, &truetype.Options{Size: size * pngScale * 0.92, DPI: 72})
	p.faces[size] = f
	return f
}

type noColor struct{}

func (noColor) RGBA() (r, g, b, a uint32) { return 0, 0, 0, 0 }

func isNone(c color.Color) bool {
	_, ok := c.(noColor)
	return ok
}

// parseColor reads the #rrggbb[aa] colours xdot writes; a transparent or
// unknown colour draws nothing rather than black.
func parseColor(s string) color.Color {
	switch s {
	case "black":
		return color.Black
	case "white":
		return color.White
	}
	if len(s) != 7 && len(s) != 9 || s[0] != '#' {
		return noColor{}
	}
	v, err := strconv.ParseUint(s[1:], 16, 64)
	if err != nil {
		return noColor{}
	}
	if len(s) == 7 {
		return color.RGBA{uint8(v >> 16), uint8(v >> 8), uint8(v), 255}
	}
	a := uint8(v)
	if a == 0 {
		return noColor{}
	}
	r, g, b := uint8(v>>24), uint8(v>>16), uint8(v>>8)
	// color.RGBA is premultiplied
	return color.RGBA{uint8(uint16(r) * uint16(a) / 255), uint8(uint16(g) * uint16(a) / 255), uint8(uint16(b) * uint16(a) / 255), a}
}
