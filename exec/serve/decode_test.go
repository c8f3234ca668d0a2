package serve

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/psgraph/psgraph/exec/data/criteo"
	"github.com/psgraph/psgraph/internal/csvrow"
)

// DecodeRequest is decodeRequest with buffers of the request's own, as
// the tests call it.
func DecodeRequest(body []byte, m *Meta) (*Request, error) {
	return decodeRequest(body, m, decodeHow{})
}

// ctrMeta is the Meta of a CTR model: 13 features, 26 hashed ids, and a
// multi-valued history column of int64 keys.
func ctrMeta() *Meta {
	return &Meta{Name: "ctr", Inputs: []TensorMeta{
		{Name: RowsInput, Datatype: dtBytes, Shape: []int64{-1}, Kind: KindRows},
		{Name: "dense", Datatype: dtFP32, Shape: []int64{-1, 13}, Kind: KindFeatures},
		{Name: "cat", Datatype: dtInt32, Shape: []int64{-1, 26}, Kind: KindIDs, Bound: 1000},
		{Name: "hist", Datatype: dtInt64, Shape: []int64{-1, 3}, Kind: KindKeys, Pad: true},
	}}
}

func TestDecodeRequest(t *testing.T) {
	m := ctrMeta()
	row := `"0\t1\t2"`
	dense := "[" + strings.Repeat("0.5,", 12) + "1e3]"
	cat := "[" + strings.Repeat("7,", 25) + "999]"
	hist := "[1,-9223372036854775808,3]"
	typed := func(rows int, nested bool) string {
		flat := func(s string) string {
			if nested {
				return strings.Repeat(s+",", rows-1) + s
			}
			return strings.Repeat(s[1:len(s)-1]+",", rows-1) + s[1:len(s)-1]
		}
		return `{"inputs":[{"name":"dense","datatype":"FP32","shape":[` + itoa(rows) + `,13],"data":[` + flat(dense) + `]},` +
			`{"name":"cat","datatype":"INT64","shape":[` + itoa(rows) + `,26],"data":[` + flat(cat) + `]},` +
			`{"name":"hist","datatype":"INT64","shape":[` + itoa(rows) + `,3],"data":[` + flat(hist) + `]}]}`
	}
	for _, c := range []struct {
		name, body string
		rows       int
		lines      []string
		outputs    []string
	}{
		{"rows flat", `{"id":"x","inputs":[{"name":"rows","datatype":"BYTES","shape":[2],"data":[` + row + `,"a,b"]}]}`, 2, []string{"0\t1\t2", "a,b"}, nil},
		{"rows nested", `{"inputs":[{"name":"rows","datatype":"BYTES","shape":[2,1],"data":[[` + row + `],["z"]]}],"outputs":[{"name":"prob"},{"name":"logits"}]}`, 2, []string{"0\t1\t2", "z"}, []string{"prob", "logits"}},
		{"typed flat", typed(3, false), 3, nil, nil},
		{"typed nested", typed(2, true), 2, nil, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			req, err := DecodeRequest([]byte(c.body), m)
			if err != nil {
				t.Fatal(err)
			}
			if req.Rows != c.rows || !slices.Equal(req.Outputs, c.outputs) {
				t.Errorf("rows %d outputs %v, want %d %v", req.Rows, req.Outputs, c.rows, c.outputs)
			}
			if c.lines != nil {
				for i, l := range req.Lines {
					if string(l) != c.lines[i] {
						t.Errorf("line %d %q, want %q", i, l, c.lines[i])
					}
				}
				return
			}
			if len(req.Typed) != 3 || len(req.Typed[0].Floats) != 13*c.rows || req.Typed[0].Floats[12] != 1000 ||
				len(req.Typed[1].Ints) != 26*c.rows || req.Typed[1].Ints[25] != 999 || req.Typed[2].Ints[1] != -1<<63 {
				t.Errorf("typed inputs decoded to %+v", req.Typed)
			}
		})
	}
	for _, c := range []struct{ name, body, want string }{
		{"not json", `{"inputs":[`, "not an inference request in JSON"},
		{"two values", `{"inputs":[]} {}`, "invalid character '{' after top-level value"},
		{"no inputs", `{"inputs":[]}`, "has no inputs"},
		{"unknown input", `{"inputs":[{"name":"x","datatype":"BYTES","shape":[1],"data":["a"]}]}`, `input "x" is not an input of model ctr`},
		{"twice", `{"inputs":[{"name":"rows","datatype":"BYTES","shape":[1],"data":["a"]},{"name":"rows","datatype":"BYTES","shape":[1],"data":["a"]}]}`, "given twice"},
		{"rows datatype", `{"inputs":[{"name":"rows","datatype":"FP32","shape":[1],"data":[1]}]}`, `input "rows" is "FP32", but it takes BYTES`},
		{"rows shape", `{"inputs":[{"name":"rows","datatype":"BYTES","shape":[1,2],"data":["a","b"]}]}`, "it takes [N] (or [N, 1])"},
		{"rows count", `{"inputs":[{"name":"rows","datatype":"BYTES","shape":[3],"data":["a","b"]}]}`, "has 2 elements, but its shape [3] holds 3"},
		{"rows not strings", `{"inputs":[{"name":"rows","datatype":"BYTES","shape":[1],"data":[5]}]}`, "not a JSON array of BYTES values"},
		{"no rows", `{"inputs":[{"name":"rows","datatype":"BYTES","shape":[0],"data":[]}]}`, "has no rows"},
		{"negative dim", `{"inputs":[{"name":"rows","datatype":"BYTES","shape":[-1],"data":["a"]}]}`, "outside [0, 2^31]"},
		{"huge shape", `{"inputs":[{"name":"dense","datatype":"FP32","shape":[2147483648,2147483648],"data":[1]}]}`, "more than 2^31"},
		{"no data", `{"inputs":[{"name":"rows","datatype":"BYTES","shape":[1]}]}`, "has no data"},
		{"binary", `{"inputs":[{"name":"rows","datatype":"BYTES","shape":[1],"data":["a"],"parameters":{"binary_data_size":4}}]}`, "binary tensor data is not supported"},
		{"binary out", `{"inputs":[{"name":"rows","datatype":"BYTES","shape":[1],"data":["a"]}],"outputs":[{"name":"prob","parameters":{"binary_data":true}}]}`, "binary tensor data is not supported"},
		{"mixed", `{"inputs":[{"name":"rows","datatype":"BYTES","shape":[1],"data":["a"]},{"name":"dense","datatype":"FP32","shape":[1,13],"data":` + dense + `}]}`, "give either the rows or every typed input"},
		{"typed missing", `{"inputs":[{"name":"dense","datatype":"FP32","shape":[1,13],"data":` + dense + `}]}`, `input "cat" is missing`},
		{"typed width", `{"inputs":[{"name":"dense","datatype":"FP32","shape":[1,12],"data":[1]}]}`, "it takes [N, 13]"},
		{"typed rows differ", `{"inputs":[{"name":"dense","datatype":"FP32","shape":[1,13],"data":` + dense + `},{"name":"cat","datatype":"INT32","shape":[2,26],"data":[]}]}`, "every input holds the same rows"},
		{"id bound", strings.Replace(typed(1, false), "999", "1000", 1), "is id 1000, outside [0, 1000)"},
		{"id negative", strings.Replace(typed(1, false), "999", "-1", 1), "outside [0, 1000)"},
		{"ids float", strings.Replace(typed(1, false), "999", "9.5", 1), "not a JSON array of INT64 values"},
		{"feature datatype", strings.Replace(typed(1, false), `"FP32"`, `"INT32"`, 1), `input "dense" is "INT32", but it takes FP32`},
		{"mixed nesting", `{"inputs":[{"name":"rows","datatype":"BYTES","shape":[2,1],"data":[["a"],"b"]}]}`, "mixes arrays and values"},
		{"output twice", `{"inputs":[{"name":"rows","datatype":"BYTES","shape":[1],"data":["a"]}],"outputs":[{"name":"prob"},{"name":"prob"}]}`, "asked for twice"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := DecodeRequest([]byte(c.body), m)
			if err == nil {
				t.Fatalf("decoded %s", c.body)
			}
			if StatusOf(err) != http.StatusBadRequest || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %d %q, want 400 saying %q", StatusOf(err), err, c.want)
			}
		})
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

// The decoder never panics and never accepts a request it did not check:
// an accepted one has rows, and each input exactly rows times its width
// of values, each id within its bound.
func FuzzDecodeRequest(f *testing.F) {
	m := ctrMeta()
	for _, s := range []string{
		`{"id":"x","inputs":[{"name":"rows","datatype":"BYTES","shape":[2],"data":["0\t1","a,b"]}]}`,
		`{"inputs":[{"name":"rows","datatype":"BYTES","shape":[1,1],"data":[["z"]]}],"outputs":[{"name":"prob"}]}`,
		`{"inputs":[{"name":"dense","datatype":"FP32","shape":[1,13],"data":[1,2,3,4,5,6,7,8,9,10,11,12,13]},{"name":"cat","datatype":"INT32","shape":[1,26],"data":[[0,1,2,3,4,5,6,7,8,9,0,1,2,3,4,5,6,7,8,9,0,1,2,3,4,5]]},{"name":"hist","datatype":"INT64","shape":[1,3],"data":[1,2,-1]}]}`,
		`{"inputs":[{"name":"rows","datatype":"BYTES","shape":[-1],"data":null}]}`,
		`{"inputs":[{"name":"dense","datatype":"FP64","shape":[2147483648,2],"data":[[]]}]}`,
		`[]`, `{}`, `null`, `{"inputs":[{}]}`,
		`{"inputs":[{"name":"rows","datatype":"BYTES","shape":[3],"data":["a\tb\\c\"d\/e\u00e9\ud83d\ude00", " x ",""]}]}`,
		// what fastWire reads, and what it leaves to encoding/json
		` { "id" : "a\"b" , "inputs" : [ { "data" : [ "0\t1\\n" , "\/" ] , "shape" : [ 2 , 1 ] , "datatype" : "BYTES" , "name" : "rows" } ] , "outputs" : [ { "name" : "pr\/ob" } ] } `,
		`{"inputs":[{"name":"rows","datatype":"BYTES","shape":[2],"data":["a\tb","c"]}],"parameters":{}}`,
		`{"inputs":[{"name":"rows","datatype":"BYTES","shape":[1],"data":["a\tb"]},{"name":"rows","datatype":"BYTES","shape":[1],"data":["c\nd"]}]}`,
		`{"ID":"x","Inputs":[{"Name":"rows","datatype":"BYTES","shape":[1],"data":["a"]}]}`,
		`{"id":"a","id":"b","inputs":[{"name":"rows","datatype":"BYTES","shape":[1],"data":["a"]}],"inputs":[{"name":"rows","datatype":"BYTES","shape":[1],"data":["b"]}]}`,
		`{"inputs":[{"name":"dense","datatype":"FP32","shape":[1,13],"data":["a\nb"]}]}`,
		`{"inputs":[{"name":"rows","datatype":"BYTES","shape":[2,1],"data":["a\tb",["c"]]}]}`,
		`{"id":"\u00e9","inputs":[{"name":"rows","datatype":"BYTES","shape":[01],"data":["x"]}]}`,
		`{"inputs":[{"name":"rows","datatype":"BYTES","shape":[1.0],"data":["x"]}]}`,
		`{"inputs":[{"name":"rows","datatype":"BYTES","shape":[-0],"data":["x"]}]}`,
		`{"inputs":[{"name":"rows","datatype":"BYTES","shape":[1e0],"data":["x"]}]}`,
		`{"inputs":[{"name":"rows","datatype":"BYTES","shape":[1234567890123456789],"data":["x"]}]}`,
		`{"id":null,"inputs":[{"name":"rows","datatype":"BYTES","shape":[1],"data":null}],"outputs":null}`,
		`{"inputs":[{"name":"rows","datatype":"BYTES","shape":[2],"data":["` + "\xff\xfe" + `","ok"]}],"id":"ok"}`,
		`{"inputs":[{"name":"rows","datatype":"BYTES","shape":[1],"data":["ok"]}],"id":"` + "\xff" + `"}`,
		`{"inputs":[{"name":"rows","datatype":"BYTES","shape":[1],"data":["x"]}],"outputs":[{"name":""}]}`,
		`{"inputs":[{"name":"rows","datatype":"BYTES","shape":[1],"data":["x\q"]}]}`,
		`{"inputs":[{"name":"rows","datatype":"BYTES","shape":[1],"data":["x"],}]}`,
		`{"inputs":[{"name":"rows","datatype":"BYTES","shape":[2147483648],"data":["x"]}]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := DecodeRequest(body, m)
		// fastWire, on the body or the handler's own copy of it, decodes
		// what encoding/json decodes, and says the same of what it refuses
		general, gerr := decodeRequest(slices.Clone(body), m, decodeHow{general: true})
		sent := slices.Clone(body)
		scratch := make([][]byte, 3, 8)                  // a previous request's lines
		text := []byte("a previous request's lines\t\n") // and their text
		handler, herr := decodeRequest(body, m, decodeHow{lines: scratch, text: &text})
		if !bytes.Equal(body, sent) {
			t.Fatalf("the decoder wrote the body %q: %q", sent, body)
		}
		for _, c := range []struct {
			how string
			req *Request
			err error
		}{{"DecodeRequest", req, err}, {"the handler", handler, herr}} {
			if fmt.Sprint(c.err) != fmt.Sprint(gerr) || !reflect.DeepEqual(c.req, general) {
				t.Fatalf("%s decodes %+v, %v; encoding/json %+v, %v", c.how, c.req, c.err, general, gerr)
			}
		}
		for _, d := range []byte{'\t', ','} {
			checkSplit(t, body, m, d, general, gerr)
		}
		if err != nil {
			if StatusOf(err) != http.StatusBadRequest || err.Error() == "" {
				t.Fatalf("error %v (status %d): want a 400 saying what is wrong", err, StatusOf(err))
			}
			return
		}
		if req.Rows <= 0 {
			t.Fatalf("accepted %d rows", req.Rows)
		}
		if req.Lines != nil {
			if len(req.Lines) != req.Rows || req.Typed != nil {
				t.Fatalf("accepted %d lines for %d rows", len(req.Lines), req.Rows)
			}
			// the lines are what encoding/json makes of the data
			var w struct {
				Inputs []struct {
					Data json.RawMessage `json:"data"`
				} `json:"inputs"`
			}
			var lines []string
			if !utf8.Valid(body) || json.Unmarshal(body, &w) != nil || json.Unmarshal(w.Inputs[0].Data, &lines) != nil {
				return // nested, or invalid UTF-8, which encoding/json replaces
			}
			for i, l := range lines {
				if string(req.Lines[i]) != l {
					t.Fatalf("line %d decoded as %q, encoding/json says %q", i, req.Lines[i], l)
				}
			}
			return
		}
		if len(req.Typed) != len(m.Inputs)-1 {
			t.Fatalf("accepted %d typed inputs", len(req.Typed))
		}
		for j, in := range m.Inputs[1:] {
			ty := req.Typed[j]
			n := len(ty.Ints)
			if in.Kind == KindFeatures {
				n = len(ty.Floats)
			}
			if int64(n) != int64(req.Rows)*in.width() {
				t.Fatalf("input %s: %d values for %d rows of %d", in.Name, n, req.Rows, in.width())
			}
			for _, v := range ty.Ints {
				if in.Kind == KindIDs && (v < -1 || v >= in.Bound || v == -1 && !in.Pad) {
					t.Fatalf("input %s: accepted id %d", in.Name, v)
				}
			}
		}
	})
}

// fastWire reads the requests clients send of rows (FuzzDecodeRequest
// checks it decodes them as encoding/json does), and leaves the rest to
// encoding/json, without writing the body it leaves.
func TestFastWireReadsTheRowsRequest(t *testing.T) {
	for _, c := range []struct {
		body string
		fast bool
	}{
		{`{"inputs":[{"name":"rows","datatype":"BYTES","shape":[2],"data":["0\t1","a,b"]}]}`, true},
		{` { "id" : "a\"b" , "inputs" : [ { "data" : [ "0\t1\\n" , "\/" ] , "shape" : [ 2 , 1 ] , "datatype" : "BYTES" , "name" : "rows" } ] , "outputs" : [ { "name" : "prob" } ] } `, true},
		{`{"inputs":[{"name":"rows","datatype":"BYTES","shape":[1],"data":["a"]},{"name":"rows","datatype":"BYTES","shape":[1],"data":["b"]}]}`, true},
		{`{"inputs":[{"name":"rows","datatype":"BYTES","shape":[2],"data":["a\tb","c"]}],"parameters":{}}`, false},
		{`{"inputs":[{"name":"rows","datatype":"BYTES","shape":[1],"data":["\u00e9"]}]}`, false},
		{`{"ID":"x","inputs":[{"name":"rows","datatype":"BYTES","shape":[1],"data":["a"]}]}`, false},
		{`{"id":"a","id":"b","inputs":[{"name":"rows","datatype":"BYTES","shape":[1],"data":["a"]}]}`, false},
		{`{"inputs":[{"name":"dense","datatype":"FP32","shape":[1,13],"data":["a\nb"]}]}`, false},
		{`{"inputs":[{"name":"rows","datatype":"BYTES","shape":[2,1],"data":[["a\tb"],["c"]]}]}`, false},
		{`{"inputs":[{"name":"rows","datatype":"BYTES","shape":[1.0],"data":["x"]}]}`, false},
		{`{"inputs":[{"name":"rows","datatype":"BYTES","shape":[1],"data":["x"]}]} x`, false},
	} {
		body := []byte(c.body)
		w, fast := fastWire(body, nil, nil, nil)
		if fast != c.fast {
			t.Errorf("fastWire reads %s: %v, want %v", c.body, fast, c.fast)
			continue
		}
		if string(body) != c.body {
			t.Errorf("fastWire wrote %s as %s", c.body, body)
		}
		if fast && (len(w.Inputs) == 0 || !w.Inputs[0].parsed) {
			t.Errorf("fastWire read %s as %+v", c.body, w)
		}
	}
}

// BenchmarkDecodeRows100 decodes a request of 100 rows of examples/ctr.yaml
// as the handler does (fastWire: split, the rows cut into fields as they
// are read, as for the model's tabs; fast, the lines with escapes decoded
// into a buffer reused from request to request, as for a model the rows
// are not cut for, and then still to be split) and with
// encoding/json alone: go test ./exec/serve -run X -bench DecodeRows100
// -benchmem (the handler's way makes no allocation but the Request's and
// its shape's).
func BenchmarkDecodeRows100(b *testing.B) {
	var buf bytes.Buffer
	if _, err := criteo.Generate(&buf, criteo.Options{Rows: 100, Seed: 1}); err != nil {
		b.Fatal(err)
	}
	body := rowsBody(strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n"))
	m := ctrMeta()
	for _, c := range []struct {
		name string
		how  decodeHow
	}{
		{"fast", decodeHow{text: new([]byte)}},
		{"split", decodeHow{text: new([]byte), split: &splitBufs{delim: '\t'}}}, // the handler's, for a TSV model
		{"encoding-json", decodeHow{general: true}},
	} {
		b.Run(c.name, func(b *testing.B) {
			own := slices.Clone(body)
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for range b.N {
				copy(own, body) // as a request's body is read into its buffer
				req, err := decodeRequest(own, m, c.how)
				if err != nil || req.Rows != 100 || c.how.split != nil && req.Split == nil {
					b.Fatal(err)
				}
				if !c.how.general {
					c.how.lines = req.Lines[:0]
				}
			}
		})
	}
}

// The rows' strings decode as encoding/json decodes them, whatever their
// escapes and wherever those fall in the eight-byte words fastWire
// copies (lines of 0 to 40 bytes of plain bytes, escapes, UTF-8, bytes
// that differ from a quote or a backslash in one bit); a line with a \u
// escape or a control character is left to encoding/json, which decodes
// or refuses it.
func TestRowsDecodeAsEncodingJSON(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	pieces := []string{`a`, `7`, `\t`, `\n`, `\"`, `\\`, `\/`, `\b`, `\f`, `\r`, `é`, "\x23", "\x5d", "\x1f", ` `, `\u00e9`, `#`, `]`}
	m := ctrMeta()
	text := new([]byte)
	var lines [][]byte
	for trial := range 5000 {
		var quoted []string
		for range 1 + r.IntN(4) {
			var l strings.Builder
			for range r.IntN(20) {
				l.WriteString(pieces[r.IntN(len(pieces))])
			}
			quoted = append(quoted, `"`+l.String()+`"`)
		}
		body := fmt.Sprintf(`{"inputs":[{"name":"rows","datatype":"BYTES","shape":[%d],"data":[%s]}]}`, len(quoted), strings.Join(quoted, ","))
		var want []string
		jerr := json.Unmarshal([]byte("["+strings.Join(quoted, ",")+"]"), &want)
		req, err := decodeRequest([]byte(body), m, decodeHow{lines: lines, text: text})
		if jerr != nil {
			if err == nil {
				t.Fatalf("trial %d: %s decoded, encoding/json refuses it: %v", trial, body, jerr)
			}
			continue
		}
		if err != nil {
			t.Fatalf("trial %d: %s: %v", trial, body, err)
		}
		for i, l := range req.Lines {
			if string(l) != want[i] {
				t.Fatalf("trial %d: line %d of %s decoded as %q, encoding/json says %q", trial, i, body, l, want[i])
			}
		}
		lines = req.Lines[:0]
	}
}

// checkSplit decodes body as the handler of a model of delimiter d does,
// cutting the rows into fields as it reads them (SplitRows), and checks it
// against general, what encoding/json decodes: the same error, or the
// same request, its rows cut where csvrow.Splitter (the data files'
// splitter, which data.LineParser.Parse runs) cuts general's lines, and
// joined again general's lines.
func checkSplit(t *testing.T, body []byte, m *Meta, d byte, general *Request, gerr error) {
	t.Helper()
	sb := &splitBufs{delim: d, bounds: []int32{7, 7, 7}, at: []int32{1}} // a previous request's
	text := []byte("a previous request's lines")
	req, err := decodeRequest(body, m, decodeHow{lines: make([][]byte, 2, 4), text: &text, split: sb})
	if fmt.Sprint(err) != fmt.Sprint(gerr) {
		t.Fatalf("split at %q: error %v, encoding/json %v", d, err, gerr)
	}
	if err != nil {
		return
	}
	if req.Split == nil {
		if !reflect.DeepEqual(req, general) {
			t.Fatalf("split at %q: decodes %+v; encoding/json %+v", d, req, general)
		}
		return
	}
	rest := *req
	rest.Split, rest.Lines = nil, general.Lines
	if req.Lines != nil || general.Lines == nil || !reflect.DeepEqual(&rest, general) || req.Split.Rows() != req.Rows {
		t.Fatalf("split at %q: decodes %+v; encoding/json %+v", d, req, general)
	}
	var fields [][]byte
	for i, line := range general.Lines {
		if got := req.Split.Line(i); !bytes.Equal(got, line) {
			t.Fatalf("split at %q: row %d joins as %q, encoding/json decodes %q", d, i, got, line)
		}
		if bytes.IndexByte(line, '"') >= 0 {
			t.Fatalf("split at %q: row %d %q has a quote, which only the splitter unquotes", d, i, line)
		}
		if raw := req.Split.Raw(i); raw != nil {
			if !bytes.Equal(raw, line) || bytes.IndexByte(line, d) >= 0 {
				t.Fatalf("split at %q: row %d %q read as the single field %q", d, i, line, raw)
			}
			continue
		}
		sp := csvrow.Splitter{Delim: d}
		if err := sp.Split(csvrow.Trim(line, d)); err != nil {
			t.Fatal(err)
		}
		fields = req.Split.Fields(i, fields[:0])
		if len(fields) < 2 || !slices.EqualFunc(fields, sp.Fields, bytes.Equal) {
			t.Fatalf("split at %q: row %d %q cut into %q, the splitter cuts %q", d, i, line, fields, sp.Fields)
		}
	}
}

// Rows of the fields, escapes, spaces and bytes near the delimiter
// clients send are cut as the data files' splitter cuts the lines
// encoding/json decodes (checkSplit): TSV rows, whose delimiter is the
// \t escape, and CSV rows, whose delimiter is itself; a row with any
// other escape leaves the request's rows to be read as lines.
func TestRowsSplitAsTheSplitter(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	pieces := []string{`a`, `7`, `68fd1e64`, `\t`, `\t`, `\t`, `,`, `,`, ` `, `-`, `+`, `\n`, `\"`, `\\`, `\/`, `\r`, `é`, "\x1f", "\t", `\u0009`, `#`}
	m := ctrMeta()
	split := map[byte]int{}
	for trial := range 5000 {
		// a third of the requests hold TSV rows, a third CSV rows, whose
		// escapes are mostly the delimiter's (TSV) or none (CSV)
		kind, others := trial%3, r.IntN(4) == 0
		var quoted []string
		for range 1 + r.IntN(4) {
			var l strings.Builder
			for range r.IntN(24) {
				p := pieces[r.IntN(len(pieces))]
				if kind < 2 && !others && (p[0] == '\\' || p[0] < ' ') && (kind == 1 || p != `\t`) {
					p = []string{`\t`, `,`}[kind]
				}
				l.WriteString(p)
			}
			quoted = append(quoted, `"`+l.String()+`"`)
		}
		body := []byte(fmt.Sprintf(`{"inputs":[{"name":"rows","datatype":"BYTES","shape":[%d],"data":[%s]}]}`, len(quoted), strings.Join(quoted, ",")))
		general, gerr := decodeRequest(slices.Clone(body), m, decodeHow{general: true})
		for _, d := range []byte{'\t', ','} {
			checkSplit(t, body, m, d, general, gerr)
			sb := &splitBufs{delim: d}
			if req, err := decodeRequest(body, m, decodeHow{split: sb}); err == nil && req.Split != nil {
				split[d]++
			}
		}
	}
	if split['\t'] < 1000 || split[','] < 1000 {
		t.Errorf("rows split at tabs in %d requests and at commas in %d of 5000: too few to check the split", split['\t'], split[','])
	}
}
