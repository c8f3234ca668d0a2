package data

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/psgraph/psgraph/exec/progress"
)

// Reading a large data file is a long phase: with a clock that passes a
// second between two counts (every 4,096 rows and at the end), the
// normalization pass of
// a stream and the loading of a set log the bytes read of the file's
// size, the rate and the time left, then their end with every byte read.
func TestReadingLogsProgress(t *testing.T) {
	const rows = 3*progressRows + 100
	content := criteoFile(t, rows, 1, false)
	for _, stream := range []bool{true, false} {
		spec := criteoSpec + "  normalize: standard\n"
		if stream {
			spec += "  stream: true\n"
		}
		g := loadModel(t, "train.tsv", content, spec)
		var b bytes.Buffer
		clock := time.Unix(0, 0)
		rep := &progress.Reporter{Log: zerolog.New(&b), Now: func() time.Time { clock = clock.Add(time.Second); return clock }}
		if stream {
			fs, err := OpenStreamProgress(g.Data, rep)
			if err != nil {
				t.Fatal(err)
			}
			fs.Close()
		} else if _, err := LoadSplitProgress(g.Data, nil, rep); err != nil {
			t.Fatal(err)
		}
		var progress, done int
		for _, l := range strings.Split(strings.TrimSpace(b.String()), "\n") {
			var m map[string]any
			if err := json.Unmarshal([]byte(l), &m); err != nil {
				t.Fatalf("%q: %v", l, err)
			}
			msg, _ := m["message"].(string)
			if !strings.Contains(msg, g.Data.CSV) {
				t.Errorf("stream %v: %q does not name the file", stream, msg)
			}
			if strings.HasSuffix(msg, ": done") {
				done++
				if want := mib(len(content)); m["done"] != want {
					t.Errorf("stream %v: the end reports %v read, want the file's %s", stream, m["done"], want)
				}
				continue
			}
			progress++
			if m["of"] != mib(len(content)) || m["pct"] == nil || m["eta"] == nil || m["rate"] == nil {
				t.Errorf("stream %v: progress line without size, share, time left or rate: %s", stream, l)
			}
		}
		if progress != 4 || done != 1 {
			t.Errorf("stream %v: %d progress lines and %d ends, want 4 (one per 4,096 rows and the last) and 1:\n%s", stream, progress, done, b.String())
		}
	}
}

func mib(n int) string { return fmt.Sprintf("%.0f MiB", float64(n)/(1<<20)) }
