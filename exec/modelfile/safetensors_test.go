package modelfile

import (
	"encoding/json"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/psgraph/psgraph/exec/tensor"
)

// int64 keys round trip through a safetensors file as I64: the full range,
// the padding key included, beside float32 and int32 tensors.
func TestSafetensorsInt64RoundTrip(t *testing.T) {
	keys := tensor.New(tensor.I64, tensor.Shape{2, 3})
	copy(keys.L, []int64{math.MinInt64, -1, 0, 1, math.MaxInt64, -6917529027641081856})
	ids := tensor.New(tensor.I32, tensor.Shape{2})
	copy(ids.I, []int32{-1, math.MaxInt32})
	rows := &tensor.Tensor{DType: tensor.F32, Shape: tensor.Shape{3}, F: []float32{0.5, -2, 3e-8}}
	path := filepath.Join(t.TempDir(), "m.safetensors")
	if err := SaveSafetensors(path, map[string]*tensor.Tensor{"keys": keys, "ids": ids, "rows": rows}, map[string]string{"k": "v"}); err != nil {
		t.Fatal(err)
	}
	got, meta, err := LoadSafetensors(path)
	if err != nil {
		t.Fatal(err)
	}
	if g := got["keys"]; g.DType != tensor.I64 || !g.Shape.Equal(keys.Shape) || !slices.Equal(g.L, keys.L) {
		t.Errorf("keys read back as %v %v %v, want %v", g.DType, g.Shape, g.L, keys.L)
	}
	if g := got["ids"]; g.DType != tensor.I32 || !slices.Equal(g.I, ids.I) {
		t.Errorf("ids read back as %v %v", g.DType, g.I)
	}
	if g := got["rows"]; g.DType != tensor.F32 || !slices.Equal(g.F, rows.F) {
		t.Errorf("rows read back as %v %v", g.DType, g.F)
	}
	if meta["k"] != "v" {
		t.Errorf("metadata %v", meta)
	}
	checkNumpyInt64(t, path, keys.L)
}

// checkNumpyInt64 reads the file's "keys" with a plain numpy reader, and
// has numpy write a file of its own that LoadSafetensors must read, where
// numpy is installed.
func checkNumpyInt64(t *testing.T, path string, want []int64) {
	py := "/usr/bin/python3"
	if exec.Command(py, "-c", "import numpy").Run() != nil {
		t.Log("numpy not installed; skipping the numpy reader check")
		return
	}
	read := `
import json, struct, sys, numpy as np
b = open(sys.argv[1], 'rb').read()
n = struct.unpack('<Q', b[:8])[0]
h = json.loads(b[8:8+n])
w = h['keys']; s, e = w['data_offsets']
assert w['dtype'] == 'I64', w
a = np.frombuffer(b[8+n+s:8+n+e], dtype='<i8').reshape(w['shape'])
print(json.dumps([str(x) for x in a.ravel()] + [list(a.shape)]))`
	out, err := exec.Command(py, "-c", read, path).Output()
	if err != nil {
		t.Fatalf("numpy reader: %v", err)
	}
	var got []any
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatal(err)
	}
	for i, v := range want {
		if s, _ := got[i].(string); s != formatInt(v) {
			t.Errorf("numpy read element %d as %v, want %d", i, got[i], v)
		}
	}
	write := `
import json, struct, sys, numpy as np
a = np.array([[-9223372036854775808, 7], [9223372036854775807, -3]], dtype='<i8')
h = json.dumps({'k': {'dtype': 'I64', 'shape': [2, 2], 'data_offsets': [0, a.nbytes]}}).encode()
h += b' ' * (-len(h) % 8)
open(sys.argv[1], 'wb').write(struct.pack('<Q', len(h)) + h + a.tobytes())`
	npPath := filepath.Join(t.TempDir(), "np.safetensors")
	if err := exec.Command(py, "-c", write, npPath).Run(); err != nil {
		t.Fatalf("numpy writer: %v", err)
	}
	m, _, err := LoadSafetensors(npPath)
	if err != nil {
		t.Fatal(err)
	}
	if k := m["k"]; k == nil || k.DType != tensor.I64 || !slices.Equal(k.L, []int64{math.MinInt64, 7, math.MaxInt64, -3}) {
		t.Errorf("numpy's I64 file read as %+v", k)
	}
}

func formatInt(v int64) string {
	b, _ := json.Marshal(v)
	return strings.TrimSpace(string(b))
}

// A header whose shape does not match its data offsets, or whose dtype
// psgraph does not read, is an error naming the tensor, never a panic or
// an allocation of the shape's size.
func TestSafetensorsRefusesBadEntries(t *testing.T) {
	dir := t.TempDir()
	for name, c := range map[string]struct {
		entry, want string
	}{
		"short":    {`{"dtype":"I64","shape":[3],"data_offsets":[0,16]}`, "do not match shape [3]"},
		"negative": {`{"dtype":"I64","shape":[-2],"data_offsets":[0,16]}`, "has shape [-2]"},
		"huge":     {`{"dtype":"F32","shape":[1000000000000,1000000000000],"data_offsets":[0,16]}`, "has shape"},
		"f64":      {`{"dtype":"F64","shape":[2],"data_offsets":[0,16]}`, "psgraph reads F32, I32 and I64"},
		// offsets whose difference wraps around to the shape's 8 bytes
		"wrapped": {`{"dtype":"I64","shape":[1],"data_offsets":[9223372036854775807,-9223372036854775801]}`, "do not match shape [1]"},
	} {
		path := filepath.Join(dir, name)
		writeRaw(t, path, `{"x":`+c.entry+`}`, 16)
		if _, _, err := LoadSafetensors(path); err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), `"x"`) {
			t.Errorf("%s: %v, want an error naming \"x\" with %q", name, err, c.want)
		}
		// refused even when the entry is not asked for
		if _, _, err := LoadSafetensorsOf(path, func(string) bool { return false }); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s, read with nothing asked: %v, want an error with %q", name, err, c.want)
		}
	}
}

func writeRaw(t *testing.T, path, header string, body int) {
	t.Helper()
	for len(header)%8 != 0 {
		header += " "
	}
	b := make([]byte, 8, 8+len(header)+body)
	b[0] = byte(len(header))
	b[1] = byte(len(header) >> 8)
	b = append(append(b, header...), make([]byte, body)...)
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// LoadSafetensorsOf reads only the tensors asked for, each with its own
// bytes (a big tensor it skips is never read), and still refuses a file
// whose skipped entries are malformed.
func TestLoadSafetensorsOfReadsWhatIsAsked(t *testing.T) {
	big := tensor.New(tensor.F32, tensor.Shape{1 << 16, 4})
	for i := range big.F {
		big.F[i] = float32(i)
	}
	mean := &tensor.Tensor{DType: tensor.F32, Shape: tensor.Shape{3}, F: []float32{1.5, -2, 7}}
	ids := tensor.New(tensor.I32, tensor.Shape{2})
	copy(ids.I, []int32{4, -1})
	path := filepath.Join(t.TempDir(), "m.safetensors")
	if err := SaveSafetensors(path, map[string]*tensor.Tensor{"table": big, "bn_mean": mean, "ids": ids}, nil); err != nil {
		t.Fatal(err)
	}
	got, _, err := LoadSafetensorsOf(path, func(name string) bool { return name != "table" })
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got["table"] != nil {
		t.Fatalf("read %d tensors (table %v), want bn_mean and ids only", len(got), got["table"] != nil)
	}
	if !slices.Equal(got["bn_mean"].F, mean.F) || !slices.Equal(got["ids"].I, ids.I) {
		t.Errorf("read bn_mean %v, ids %v; want %v, %v", got["bn_mean"].F, got["ids"].I, mean.F, ids.I)
	}
	all, _, err := LoadSafetensors(path)
	if err != nil || !slices.Equal(all["table"].F, big.F) {
		t.Fatalf("the whole file read back wrong (%v)", err)
	}
	// A skipped entry whose offsets overrun the file is still an error.
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(t.TempDir(), "bad.safetensors")
	if err := os.WriteFile(bad, raw[:len(raw)-4], 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := LoadSafetensorsOf(bad, func(string) bool { return false }); err == nil || !strings.Contains(err.Error(), "not a valid safetensors file") {
		t.Errorf("a truncated file read with nothing asked: %v, want it refused", err)
	}
}
