package viz

import (
	"bytes"
	"context"
	"fmt"

	"github.com/goccy/go-graphviz"
)

// RenderSVG lays out DOT text and renders it as SVG in-process, with
// Graphviz compiled to WebAssembly (github.com/goccy/go-graphviz): no
// system Graphviz and no cgo.
func RenderSVG(ctx context.Context, dot []byte) ([]byte, error) {
	return render(ctx, dot, graphviz.SVG)
}

// render runs the in-process Graphviz on DOT text for one output format.
func render(ctx context.Context, dot []byte, format graphviz.Format) ([]byte, error) {
	gv, err := graphviz.New(ctx)
	if err != nil {
		return nil, fmt.Errorf("starting the graphviz renderer: %w", err)
	}
	defer gv.Close()
	g, err := graphviz.ParseBytes(dot)
	if err != nil {
		return nil, fmt.Errorf("parsing the DOT text: %w", err)
	}
	defer g.Close()
	var buf bytes.Buffer
	if err := gv.Render(ctx, g, format, &buf); err != nil {
		return nil, fmt.Errorf("laying out the graph (%s): %w", format, err)
	}
	return buf.Bytes(), nil
}
