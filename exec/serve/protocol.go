package serve

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strings"
)

// RowsInput is the name of the input that carries raw rows: a BYTES
// tensor of shape [N] (or [N, 1]), each element one line of the model's
// data file.
const RowsInput = "rows"

// Datatypes of the protocol that psgraph's tensors use.
const (
	dtBytes = "BYTES"
	dtFP32  = "FP32"
	dtInt32 = "INT32"
	dtInt64 = "INT64"
)

// Meta is what a request is checked against: the model's name and its
// inputs (RowsInput first, then the data variables a request may give as
// typed tensors instead) and default outputs, as the model metadata
// endpoint lists them.
type Meta struct {
	Name    string
	Inputs  []TensorMeta
	Outputs []TensorMeta
	// delim is the rows' delimiter when the handler cuts them into fields
	// as it reads them (SplitRows; 0: it reads them as lines).
	delim byte
}

// TensorMeta is an input or output tensor of the model: its name,
// datatype and shape, -1 standing for the rows of a request.
type TensorMeta struct {
	Name     string  `json:"name"`
	Datatype string  `json:"datatype"`
	Shape    []int64 `json:"shape"`
	// Bound, for an input of ids: every id is below it (hash_buckets or
	// num_ids; 0: no bound known); -1 pads a multi-valued field (Pad).
	Bound int64 `json:"-"`
	Pad   bool  `json:"-"`
	// Kind is what the input's values are: a feature, int32 ids or
	// int64 keys (for the rows input: "").
	Kind InputKind `json:"-"`
}

// InputKind is what a typed input's values are.
type InputKind uint8

const (
	KindRows     InputKind = iota // the rows input
	KindFeatures                  // float features, as in the file (FP32)
	KindIDs                       // int32 ids, already hashed (INT32 or INT64 on the wire)
	KindKeys                      // int64 keys, already hashed (INT64)
)

// width is the values per row of a typed input.
func (t TensorMeta) width() int64 {
	w := int64(1)
	for _, d := range t.Shape[1:] {
		w *= d
	}
	return w
}

// Request is a decoded, checked inference request: N rows, given either
// as lines (Lines), or as lines already cut into their fields (Split,
// which the handler asks for: Lines is then nil), or as one typed tensor
// per data input (Typed, in the order of Meta.Inputs[1:]).
type Request struct {
	ID      string
	Rows    int
	Lines   [][]byte
	Split   *SplitRows
	Typed   []Typed
	Outputs []string // the outputs asked for (nil: the model's default)
}

// Typed is a typed input's values, row-major: Floats for features, Ints
// for ids and keys.
type Typed struct {
	Floats []float64
	Ints   []int64
}

// Error is a request the server refuses, with the HTTP status it answers
// and the message of the protocol's error body {"error": "..."}.
type Error struct {
	Status int
	Msg    string
}

func (e *Error) Error() string { return e.Msg }

func badRequest(format string, args ...any) *Error {
	return &Error{Status: http.StatusBadRequest, Msg: fmt.Sprintf(format, args...)}
}

// StatusOf is the HTTP status of an error the server answers with: an
// *Error's, else 500.
func StatusOf(err error) int {
	var e *Error
	if errors.As(err, &e) {
		return e.Status
	}
	return http.StatusInternalServerError
}

// wireRequest is the protocol's $inference_request.
type wireRequest struct {
	ID         string         `json:"id"`
	Parameters map[string]any `json:"parameters"`
	Inputs     []wireInput    `json:"inputs"`
	Outputs    []wireOutput   `json:"outputs"`
}

type wireInput struct {
	Name       string          `json:"name"`
	Shape      []int64         `json:"shape"`
	Datatype   string          `json:"datatype"`
	Parameters map[string]any  `json:"parameters"`
	Data       json.RawMessage `json:"data"`
	// lines are the data's strings, when fastWire read them (parsed), or
	// split their rows cut into fields.
	lines  [][]byte
	split  *SplitRows
	parsed bool
}

type wireOutput struct {
	Name       string         `json:"name"`
	Parameters map[string]any `json:"parameters"`
}

// maxElements bounds the elements of one input (the body limit bounds
// them first in practice; this keeps a shape's product from overflowing).
const maxElements = 1 << 31

// decodeHow is how decodeRequest reads a body.
type decodeHow struct {
	// general: with encoding/json alone, not fastWire (the reference
	// FuzzDecodeRequest compares fastWire with).
	general bool
	// text is room for the lines with escapes, decoded (nil: a buffer of
	// the request's own); grown, it is kept in *text for the next request.
	text *[]byte
	// lines is room for the lines, reused from request to request.
	lines [][]byte
	// split, when not nil and its delim set (the model's delimiter, one
	// splits() takes), is room for the rows cut into fields as they are
	// read (Request.Split), reused from request to request.
	split *splitBufs
}

// decodeRequest decodes and checks an inference request body against the
// model m, reading the body with fastWire unless how says general, or it
// cannot. It is a pure function of the body and m (how only lends it
// buffers): any error is an *Error (400) saying what is wrong and what to
// send instead.
func decodeRequest(body []byte, m *Meta, how decodeHow) (*Request, error) {
	var w wireRequest
	fast := false
	if !how.general {
		w, fast = fastWire(body, how.lines, how.text, how.split)
	}
	if !fast {
		w = wireRequest{}
		if err := json.Unmarshal(body, &w); err != nil {
			return nil, badRequest("the request body is not an inference request in JSON: %v; send one object {\"inputs\": [{\"name\": \"rows\", \"datatype\": \"BYTES\", \"shape\": [N], \"data\": [...]}]}", err)
		}
	}
	if binaryParam(w.Parameters, "binary_data_output") {
		return nil, badRequest("binary tensor data is not supported: psgraph answers in JSON; drop the binary_data_output parameter")
	}
	if len(w.Inputs) == 0 {
		return nil, badRequest("the request has no inputs; send %q (a BYTES tensor of data lines) or %s", RowsInput, typedNames(m))
	}
	req := &Request{ID: w.ID, Rows: -1}
	given := map[string]int{}
	for i := range w.Inputs {
		in := &w.Inputs[i]
		at := slices.IndexFunc(m.Inputs, func(t TensorMeta) bool { return t.Name == in.Name })
		if at < 0 {
			return nil, badRequest("input %q is not an input of model %s; its inputs are %s", in.Name, m.Name, inputNames(m))
		}
		if _, dup := given[in.Name]; dup {
			return nil, badRequest("input %q is given twice; give each input once", in.Name)
		}
		given[in.Name] = i
		if _, ok := in.Parameters["binary_data_size"]; ok {
			return nil, badRequest("input %q: binary tensor data is not supported; send its data as a JSON array", in.Name)
		}
		rows, err := checkShape(in, m.Inputs[at])
		if err != nil {
			return nil, err
		}
		if req.Rows >= 0 && rows != req.Rows {
			return nil, badRequest("input %q has %d rows, but input %q has %d; every input holds the same rows", in.Name, rows, w.Inputs[0].Name, req.Rows)
		}
		req.Rows = rows
	}
	if _, ok := given[RowsInput]; ok {
		if len(given) > 1 {
			return nil, badRequest("the request gives %q and typed inputs; give either the rows or every typed input (%s)", RowsInput, typedNames(m))
		}
		in := &w.Inputs[given[RowsInput]]
		lines, ok := in.lines, in.parsed
		if !ok {
			// in a copy: a failed stringArray leaves its data unusable for
			// decodeData; room for the rows the shape names, as many as the
			// data's bytes can hold
			data := slices.Clone(in.Data)
			lines, ok = stringArray(data, slices.Grow(how.lines[:0], min(req.Rows, len(data)/3+1)))
		}
		if !ok { // nested, or not strings: the general decoder (and its errors)
			var strs []string
			if err := decodeData(in, 2, &strs); err != nil {
				return nil, err
			}
			for _, l := range strs {
				lines = append(lines, []byte(l))
			}
		}
		n := len(lines)
		if in.split != nil {
			n = in.split.Rows()
		}
		if n != req.Rows {
			return nil, badRequest("input %q has %d elements, but its shape %v holds %d", in.Name, n, in.Shape, req.Rows)
		}
		req.Lines, req.Split = lines, in.split
	} else {
		req.Typed = make([]Typed, len(m.Inputs)-1)
		for j, t := range m.Inputs[1:] {
			i, ok := given[t.Name]
			if !ok {
				return nil, badRequest("input %q is missing; typed inputs give every one of %s (or send %q, the data lines, alone)", t.Name, typedNames(m), RowsInput)
			}
			if err := decodeTyped(&w.Inputs[i], t, req.Rows, &req.Typed[j]); err != nil {
				return nil, err
			}
		}
	}
	for _, o := range w.Outputs {
		if o.Name == "" {
			return nil, badRequest("an output has no name; name pred, prob or a variable of the model")
		}
		if binaryParam(o.Parameters, "binary_data") {
			return nil, badRequest("output %q: binary tensor data is not supported: psgraph answers in JSON; drop the binary_data parameter", o.Name)
		}
		if slices.Contains(req.Outputs, o.Name) {
			return nil, badRequest("output %q is asked for twice; name each output once", o.Name)
		}
		req.Outputs = append(req.Outputs, o.Name)
	}
	return req, nil
}

// binaryParam says whether parameter name is set to true.
func binaryParam(p map[string]any, name string) bool {
	v, ok := p[name].(bool)
	return ok && v
}

// checkShape checks an input's datatype and shape against the model's
// and returns its rows.
func checkShape(in *wireInput, t TensorMeta) (int, error) {
	if len(in.Data) == 0 {
		return 0, badRequest("input %q has no data; give its values as a JSON array", in.Name)
	}
	if !datatypeFits(in.Datatype, t.Kind) {
		return 0, badRequest("input %q is %q, but it takes %s; send it as %s", in.Name, in.Datatype, t.Datatype, t.Datatype)
	}
	n := int64(1)
	for _, d := range in.Shape {
		if d < 0 || d > maxElements {
			return 0, badRequest("input %q: shape %v has a dimension outside [0, 2^31]; give the rows and the values of each", in.Name, in.Shape)
		}
		if n *= d; n > maxElements {
			return 0, badRequest("input %q: shape %v holds more than 2^31 elements; send fewer rows a request", in.Name, in.Shape)
		}
	}
	want := t.width()
	switch {
	case len(in.Shape) == 0:
		return 0, badRequest("input %q has no shape; give [N] or [N, %d] for N rows", in.Name, want)
	case in.Shape[0] == 0:
		return 0, badRequest("input %q has no rows; send at least one", in.Name)
	case len(in.Shape) == 1 && want == 1:
	case len(in.Shape) == 2 && in.Shape[1] == want:
	default:
		if want == 1 {
			return 0, badRequest("input %q has shape %v; it takes [N] (or [N, 1]) for N rows", in.Name, in.Shape)
		}
		return 0, badRequest("input %q has shape %v; it takes [N, %d] for N rows", in.Name, in.Shape, want)
	}
	return int(in.Shape[0]), nil
}

// datatypeFits says whether a wire datatype can carry an input of kind k:
// rows are BYTES, features FP32 (or FP64, read exactly), ids and keys any
// integer type.
func datatypeFits(dt string, k InputKind) bool {
	switch k {
	case KindRows:
		return dt == dtBytes
	case KindFeatures:
		return dt == dtFP32 || dt == "FP64"
	}
	switch dt {
	case "INT8", "INT16", dtInt32, dtInt64, "UINT8", "UINT16", "UINT32", "UINT64":
		return true
	}
	return false
}

// decodeTyped decodes a typed input's data and checks its values.
func decodeTyped(in *wireInput, t TensorMeta, rows int, out *Typed) error {
	want := int64(rows) * t.width()
	if t.Kind == KindFeatures {
		if err := decodeData(in, len(in.Shape), &out.Floats); err != nil {
			return err
		}
		if int64(len(out.Floats)) != want {
			return badRequest("input %q has %d values, but its shape %v holds %d", in.Name, len(out.Floats), in.Shape, want)
		}
		for i, v := range out.Floats {
			if math.Abs(v) > math.MaxFloat32 {
				return badRequest("input %q: value %d (row %d) is %g, outside float32's range", in.Name, i, i/int(t.width()), v)
			}
		}
		return nil
	}
	if err := decodeData(in, len(in.Shape), &out.Ints); err != nil {
		return err
	}
	if int64(len(out.Ints)) != want {
		return badRequest("input %q has %d values, but its shape %v holds %d", in.Name, len(out.Ints), in.Shape, want)
	}
	for i, v := range out.Ints {
		row := i / int(t.width())
		switch {
		case v == -1 && t.Pad:
		case t.Kind == KindIDs && (v < 0 || t.Bound > 0 && v >= t.Bound):
			bound := "2^31"
			if t.Bound > 0 {
				bound = fmt.Sprint(t.Bound)
			}
			pad := ""
			if t.Pad {
				pad = " (or -1, padding)"
			}
			return badRequest("input %q: value %d (row %d) is id %d, outside [0, %s)%s; send the ids the model's data spec makes of the fields", in.Name, i, row, v, bound, pad)
		case t.Kind == KindIDs && v > math.MaxInt32:
			return badRequest("input %q: value %d (row %d) is id %d, outside int32", in.Name, i, row, v)
		case t.Kind == KindKeys && v == math.MinInt64 && !t.Pad:
			return badRequest("input %q: value %d (row %d) is -2^63, the padding key, in a column of one key a field", in.Name, i, row)
		}
	}
	return nil
}

// decodeData decodes an input's data, given flat or nested as its shape
// (at most depth levels of arrays), into the flat slice out points at.
func decodeData[T any](in *wireInput, depth int, out *[]T) error {
	var flat []T
	err := json.Unmarshal(in.Data, &flat)
	if err == nil {
		*out = append(*out, flat...)
		return nil
	}
	var nested []json.RawMessage
	if depth <= 1 || json.Unmarshal(in.Data, &nested) != nil {
		return badRequest("input %q: its data is not a JSON array of %s values (row-major, flat or nested as its shape): %v", in.Name, in.Datatype, err)
	}
	arrays := 0
	for _, el := range nested {
		if el = bytes.TrimSpace(el); len(el) > 0 && el[0] == '[' {
			arrays++
		}
	}
	switch arrays {
	case 0: // values, one of the wrong type
		return badRequest("input %q: its data is not a JSON array of %s values (row-major, flat or nested as its shape): %v", in.Name, in.Datatype, err)
	case len(nested):
	default:
		return badRequest("input %q: its data mixes arrays and values; give it flat, or nested as its shape", in.Name)
	}
	for _, el := range nested {
		sub := wireInput{Name: in.Name, Datatype: in.Datatype, Data: el}
		if err := decodeData(&sub, depth-1, out); err != nil {
			return err
		}
	}
	return nil
}

func inputNames(m *Meta) string {
	names := make([]string, len(m.Inputs))
	for i, t := range m.Inputs {
		names[i] = fmt.Sprintf("%q (%s %v)", t.Name, t.Datatype, t.Shape)
	}
	return strings.Join(names, ", ")
}

func typedNames(m *Meta) string {
	if len(m.Inputs) <= 1 {
		return "no typed inputs"
	}
	names := make([]string, len(m.Inputs)-1)
	for i, t := range m.Inputs[1:] {
		names[i] = fmt.Sprintf("%q (%s %v)", t.Name, t.Datatype, t.Shape)
	}
	return strings.Join(names, ", ")
}
