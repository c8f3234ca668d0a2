package program

import (
	"slices"
	"strings"
	"testing"
	"unsafe"

	"github.com/psgraph/psgraph/exec/tensor"
	"github.com/psgraph/psgraph/internal/testfix"
)

// hugeAdvised says whether the mapping holding address p is advised for
// transparent huge pages (its VmFlags in /proc/self/smaps hold hg).
func hugeAdvised(t *testing.T, p uintptr) bool {
	flags, err := testfix.MappingField(p, "VmFlags")
	if err != nil {
		t.Fatal(err)
	}
	return slices.Contains(strings.Fields(flags), "hg")
}

// A large parameter and its optimizer state are first written (or read,
// the zero state) on ordinary pages, and advised for huge pages only once Init
// has done so; their values are those drawn without any advice.
func TestInitAdvisesHugePagesAfterTheFirstTouch(t *testing.T) {
	p := bigModel(t, 300000, "momentum")
	big := []string{"W", "W@velocity"}
	addr := map[string]uintptr{}
	for _, name := range big {
		tt := p.Scope[name]
		if tt == nil {
			t.Fatalf("no %s in the program's scope", name)
		}
		// A 2 MiB page inside the tensor, past the alignment of its start.
		addr[name] = (uintptr(unsafe.Pointer(unsafe.SliceData(tt.F))) + 4<<20) &^ (2<<20 - 1)
		if hugeAdvised(t, addr[name]) {
			t.Fatalf("%s is advised for huge pages before Init wrote it", name)
		}
	}
	if err := Init(p, InitOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, name := range big {
		if !hugeAdvised(t, addr[name]) {
			t.Errorf("%s (%d MB) is not advised for huge pages after Init", name, len(p.Scope[name].F)*4>>20)
		}
	}
	want := reference(p.Graph.Vars["W"].Init, tensor.Shape{16, 300000}, 16, 300000, 0, 1)
	for i, v := range p.Scope["W"].F {
		if v != want[i] {
			t.Fatalf("W value %d = %v after Init, want %v", i, v, want[i])
		}
	}
	for i, v := range p.Scope["W@velocity"].F {
		if v != 0 {
			t.Fatalf("W@velocity value %d = %v after Init, want 0", i, v)
		}
	}
}
