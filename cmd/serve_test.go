package cmd_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// inferResponse is the protocol's $inference_response.
type inferResponse struct {
	ModelName    string `json:"model_name"`
	ModelVersion string `json:"model_version"`
	ID           string `json:"id"`
	Outputs      []struct {
		Name     string    `json:"name"`
		Datatype string    `json:"datatype"`
		Shape    []int     `json:"shape"`
		Data     []float64 `json:"data"`
	} `json:"outputs"`
	Error string `json:"error"`
}

// postJSON posts body to url and decodes the answer into out; it returns
// the status.
func postJSON(t *testing.T, url string, body any, out any) int {
	t.Helper()
	b, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Post(url, "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			t.Fatalf("%s answered %d %q: %v", url, resp.StatusCode, data, err)
		}
	}
	return resp.StatusCode
}

// startServe starts psgraph serve on a free loopback port and waits until
// it is ready; it returns the process and the server's base URL.
func startServe(t *testing.T, args ...string) (*proc, string) {
	t.Helper()
	addr := freeAddr(t)
	p := start(t, "serve", nil, append(append([]string{"serve"}, args...), "--listen", addr)...)
	base := "http://" + addr
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get(base + "/v2/health/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p, base
			}
		}
		select {
		case err := <-p.done:
			p.done <- err
			t.Fatalf("psgraph serve exited (%v) before it was ready:\n%s", err, p.stderrText())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("psgraph serve not ready within a minute:\n%s", p.stderrText())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// closeTo says whether a server's float32 value is predict's to float32
// rounding (a few units in the last place: the two compile the model at
// other batch sizes).
func closeTo(a, b float64) bool {
	return math.Abs(a-b) <= 4*math.Abs(b)*0x1p-23+1e-9
}

// Predictions over HTTP equal psgraph predict's for the same rows and
// model file: a dense model (digits), the CTR example (a hashed table,
// of 100,000 rows here: smallCTRTable)
// and its dynamic-table twin, rows given with and without their label
// column, in requests of 100 rows; and digits' features given as a typed
// FP32 tensor too. The responses' model_version is the training step the
// file records (40). SIGTERM ends the server with exit 0.
func TestServeEqualsPredict(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ctrData := filepath.Join(dir, "ctr.tsv")
	if r := psgraph(t, "gen", "criteo", "-o", ctrData, "--rows", "3000", "--seed", "3", "--vocab", "500"); r.code != 0 {
		t.Fatalf("gen: exit %d\n%s", r.code, r.stderr)
	}
	ctr := withData(t, dir, "examples/ctr.yaml", "data/ctr.tsv", ctrData)
	small, err := os.ReadFile(ctr)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(ctr, []byte(smallCTRTable(t, string(small))), 0o644); err != nil {
		t.Fatal(err)
	}
	dynFile, dynData := ctrDynamicExample(t)
	for _, c := range []struct {
		name, model, data string
		labelFirst        bool
		delim             string
		typed             string // features to send as a typed tensor (digits)
	}{
		{"digits", "examples/digits-mlp.yaml", "examples/data/digits.csv", false, ",", "x"},
		{"ctr", ctr, ctrData, true, "\t", ""},
		{"ctr-dynamic", dynFile, dynData, true, "\t", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			save := filepath.Join(dir, c.name+".safetensors")
			if r := psgraph(t, "run", "--role", "local", c.model, "--steps", "40", "--save", save); r.code != 0 {
				t.Fatalf("run: exit %d\n%s", r.code, r.stderr)
			}
			src, err := os.ReadFile(filepathFromRoot(c.data))
			if err != nil {
				t.Fatal(err)
			}
			lines := strings.Split(strings.TrimSpace(string(src)), "\n")[:300]
			rows := filepath.Join(dir, c.name+"-rows.txt")
			if err := os.WriteFile(rows, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			out := filepath.Join(dir, c.name+"-pred.csv")
			if r := psgraph(t, "predict", c.model, "--init-from", save, "--data", rows, "-o", out); r.code != 0 {
				t.Fatalf("predict: exit %d\n%s", r.code, r.stderr)
			}
			header, want := readPredictions(t, out)
			srv, base := startServe(t, c.model, "--init-from", save)
			var meta struct {
				Name string `json:"name"`
			}
			resp, err := http.Get(base + "/v2/health/ready")
			if err != nil || resp.StatusCode != 200 {
				t.Fatalf("ready: %v %v", resp, err)
			}
			resp.Body.Close()
			name := modelName(t, c.model)
			if postJSON(t, base+"/v2/repository/index", nil, nil) != 200 {
				t.Error("repository index failed")
			}
			r, err := http.Get(base + "/v2/models/" + name)
			if err != nil {
				t.Fatal(err)
			}
			json.NewDecoder(r.Body).Decode(&meta)
			r.Body.Close()
			if meta.Name != name {
				t.Fatalf("metadata names %q, want %q", meta.Name, name)
			}
			for start := 0; start < len(lines); start += 100 {
				batch := lines[start : start+100]
				if start == 100 { // these rows without their label column
					batch = make([]string, 100)
					for i, l := range lines[start : start+100] {
						f := strings.Split(l, c.delim)
						if c.labelFirst {
							f = f[1:]
						} else {
							f = f[:len(f)-1]
						}
						batch[i] = strings.Join(f, c.delim)
					}
				}
				input := map[string]any{"name": "rows", "datatype": "BYTES", "shape": []int{len(batch)}, "data": batch}
				if start == 200 && c.typed != "" { // the features as numbers
					var vals [][]float64
					for _, l := range batch {
						f := strings.Split(l, c.delim)
						row := make([]float64, len(f)-1)
						for i := range row {
							row[i], _ = strconv.ParseFloat(f[i], 64)
						}
						vals = append(vals, row)
					}
					input = map[string]any{"name": c.typed, "datatype": "FP32", "shape": []int{len(batch), len(vals[0])}, "data": vals}
				}
				var res inferResponse
				id := fmt.Sprintf("req-%d", start)
				if code := postJSON(t, base+"/v2/models/"+name+"/infer", map[string]any{"id": id, "inputs": []any{input}}, &res); code != 200 {
					t.Fatalf("infer rows %d..: %d %s", start, code, res.Error)
				}
				// the version is the training step the file records: run --save of 40 steps
				if res.ID != id || res.ModelName != name || res.ModelVersion != "40" {
					t.Errorf("response id %q model %q version %q, want %q %q 40", res.ID, res.ModelName, res.ModelVersion, id, name)
				}
				got := flattenOutputs(t, res, 100)
				for i := range batch {
					w := want[start+i]
					if len(got[i]) != len(w) {
						t.Fatalf("row %d: %d values over HTTP (%v), predict has %d (%v)", start+i, len(got[i]), header, len(w), w)
					}
					for j := range w {
						if !closeTo(got[i][j], w[j]) {
							t.Fatalf("row %d %s: %v over HTTP, predict %v", start+i, header[j], got[i][j], w[j])
						}
					}
				}
			}
			srv.cmd.Process.Signal(syscall.SIGTERM)
			if r := srv.wait(t, 30*time.Second); r.code != 0 {
				t.Errorf("serve exited %d on SIGTERM, want 0\n%s", r.code, r.stderr)
			}
		})
	}
}

// flattenOutputs is each row's output values side by side, as predict's
// columns are.
func flattenOutputs(t *testing.T, res inferResponse, rows int) [][]float64 {
	t.Helper()
	out := make([][]float64, rows)
	for _, o := range res.Outputs {
		if o.Shape[0] != rows || len(o.Data)%rows != 0 {
			t.Fatalf("output %s has shape %v and %d values, want %d rows", o.Name, o.Shape, len(o.Data), rows)
		}
		w := len(o.Data) / rows
		for i := range out {
			out[i] = append(out[i], o.Data[i*w:(i+1)*w]...)
		}
	}
	return out
}

// withData writes a copy of an example model reading another data file.
func withData(t *testing.T, dir, example, from, to string) string {
	t.Helper()
	src, err := os.ReadFile(filepathFromRoot(example))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(src), "csv: "+from) {
		t.Fatalf("%s does not read %s", example, from)
	}
	path := filepath.Join(dir, filepath.Base(example))
	if err := os.WriteFile(path, []byte(strings.Replace(string(src), "csv: "+from, "csv: "+to, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// filepathFromRoot is a path the binary (run from the repository root)
// takes, as the test (run from cmd/) opens it.
func filepathFromRoot(p string) string {
	if filepath.IsAbs(p) {
		return p
	}
	return filepath.Join("..", p)
}

// modelName is a model file's name: key.
func modelName(t *testing.T, model string) string {
	t.Helper()
	src, err := os.ReadFile(filepathFromRoot(model))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(src), "\n") {
		if n, ok := strings.CutPrefix(l, "name: "); ok {
			return strings.TrimSpace(n)
		}
	}
	t.Fatalf("%s has no name:", model)
	return ""
}

// SIGHUP reads --init-from again: the server then serves the new file's
// parameters as version 200, the training step the file records, equal
// to psgraph predict's with that file.
func TestServeReloadsOnSIGHUP(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	model := "examples/digits-mlp.yaml"
	save := filepath.Join(dir, "model.safetensors")
	if r := psgraph(t, "run", "--role", "local", model, "--steps", "5", "--save", save); r.code != 0 {
		t.Fatalf("run: exit %d\n%s", r.code, r.stderr)
	}
	srv, base := startServe(t, model, "--init-from", save)
	newer := filepath.Join(dir, "newer.safetensors")
	if r := psgraph(t, "run", "--role", "local", model, "--steps", "200", "--save", newer); r.code != 0 {
		t.Fatalf("run: exit %d\n%s", r.code, r.stderr)
	}
	if err := os.Rename(newer, save); err != nil {
		t.Fatal(err)
	}
	srv.cmd.Process.Signal(syscall.SIGHUP)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		var meta struct {
			Versions []string `json:"versions"`
		}
		r, err := http.Get(base + "/v2/models/digits-mlp")
		if err != nil {
			t.Fatal(err)
		}
		json.NewDecoder(r.Body).Decode(&meta)
		r.Body.Close()
		if len(meta.Versions) == 1 && meta.Versions[0] == "200" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("versions %v 30 s after SIGHUP, want [200]\n%s", meta.Versions, srv.stderrText())
		}
	}
	servesAsPredict(t, base, model, "digits-mlp", save, "examples/data/digits.csv", 50, "200", "the server after SIGHUP")
	srv.cmd.Process.Signal(syscall.SIGTERM)
	if r := srv.wait(t, 30*time.Second); r.code != 0 {
		t.Errorf("exit %d on SIGTERM\n%s", r.code, r.stderr)
	}
}

// serve's usage errors exit 2, a missing model file 1, each saying what
// to give.
func TestServeBadArgumentsExit(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"serve", "examples/digits-mlp.yaml"}, 2, "serve needs --init-from F.safetensors"},
		{[]string{"serve", "examples/digits-mlp.yaml", "--init-from", "x.safetensors", "--max-concurrent", "0"}, 2, "must be positive"},
		{[]string{"serve", "examples/digits-mlp.yaml", "--init-from", "no/such.safetensors"}, 1, "no/such.safetensors"},
	} {
		r := psgraph(t, c.args...)
		if r.code != c.code || !strings.Contains(r.stderr, c.want) {
			t.Errorf("psgraph %v: exit %d %q, want %d saying %q", c.args, r.code, r.stderr, c.code, c.want)
		}
	}
}

// servesAsPredict checks that the server at base answers the first n rows
// of data as psgraph predict does with the model file save, at version
// (any when ""); what names the server in failures.
func servesAsPredict(t *testing.T, base, model, name, save, data string, n int, version, what string) {
	t.Helper()
	src, err := os.ReadFile(filepathFromRoot(data))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(src)), "\n")[:n]
	dir := t.TempDir()
	rows, out := filepath.Join(dir, "rows.csv"), filepath.Join(dir, "pred.csv")
	if err := os.WriteFile(rows, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if r := psgraph(t, "predict", model, "--init-from", save, "--data", rows, "-o", out); r.code != 0 {
		t.Fatalf("predict: exit %d\n%s", r.code, r.stderr)
	}
	_, want := readPredictions(t, out)
	var res inferResponse
	body := map[string]any{"inputs": []any{map[string]any{"name": "rows", "datatype": "BYTES", "shape": []int{n}, "data": lines}}}
	if code := postJSON(t, base+"/v2/models/"+name+"/infer", body, &res); code != 200 || version != "" && res.ModelVersion != version {
		t.Fatalf("infer: %d version %q %s, want 200 at version %q", code, res.ModelVersion, res.Error, version)
	}
	got := flattenOutputs(t, res, n)
	for i := range want {
		for j := range want[i] {
			if !closeTo(got[i][j], want[i][j]) {
				t.Fatalf("row %d value %d: %v from %s, %v from predict with %s", i, j, got[i][j], what, want[i][j], save)
			}
		}
	}
}
