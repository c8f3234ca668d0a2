package dsl

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// An online data section survives Marshal and Parse: the kafka source
// with its TLS and SASL, standard input, a followed directory, and the
// keys that shape a stream; a split plan's trainer.yaml carries them.
func TestMarshalRoundTripOnline(t *testing.T) {
	dir := t.TempDir()
	ca := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(ca, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "parts"), 0o755); err != nil {
		t.Fatal(err)
	}
	body := `
  features: {name: x, columns: [1, 3]}
  label: {name: y, column: 0}
params:
  W: {shape: [2, 2]}
ops:
  - {type: matmul, inputs: [x, W], outputs: [z]}
  - {type: softmax_cross_entropy, inputs: [z, y], outputs: [loss]}
train: {loss: loss, batch: 4, optimizer: {type: sgd, lr: 0.1}}
`
	for _, src := range []string{
		`  kafka: {brokers: ["127.0.0.1:9092", "h:9093"], topic: clicks, client_id: me, start: "2024-05-01T00:00:00Z", tls: {ca: ca.pem, server_name: kafka}, sasl: {mechanism: scram-sha-512, user: u, password_env: PW}}
  on_bad_row: skip
  metrics_window: 5000`,
		`  kafka: {brokers: ["k:9092"], topic: clicks, start: earliest, idle_after: never}`,
		`  kafka: {brokers: ["k:9092"], topic: clicks, idle_after: 250ms}`,
		`  csv: "-"
  normalize: standard
  normalize_rows: 100`,
		`  csv: parts
  follow: true`,
	} {
		file := filepath.Join(dir, "m.yaml")
		g, err := Parse(file, []byte("psgraph: 1\ndata:\n"+src+body))
		if err != nil {
			t.Fatal(err)
		}
		if g.Data.Online == nil {
			t.Fatalf("%s: not an online source", src)
		}
		out, err := Marshal(g)
		if err != nil {
			t.Fatal(err)
		}
		h, err := Parse(file, out)
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		a, b := *g.Data.Online, *h.Data.Online
		a.Pos, b.Pos, a.NormalizeRowsPos, b.NormalizeRowsPos, a.FollowPos, b.FollowPos = Pos{}, Pos{}, Pos{}, Pos{}, Pos{}, Pos{}
		if a.Kafka != nil {
			ka, kb := *a.Kafka, *b.Kafka
			ka.Pos, kb.Pos = Pos{}, Pos{}
			if !reflect.DeepEqual(ka, kb) {
				t.Errorf("kafka %+v became %+v\n%s", ka, kb, out)
			}
			a.Kafka, b.Kafka = nil, nil
		}
		if k := g.Data.Online.Kafka; k != nil {
			want := DefaultIdleAfter
			switch {
			case strings.Contains(src, "never"):
				want = 0
			case strings.Contains(src, "250ms"):
				want = 250 * time.Millisecond
			}
			if k.IdleAfter != want {
				t.Errorf("%s: idle_after %v, want %v", src, k.IdleAfter, want)
			}
		}
		if !reflect.DeepEqual(a, b) || g.Data.CSV != h.Data.CSV {
			t.Errorf("%+v (%s) became %+v (%s)\n%s", a, g.Data.CSV, b, h.Data.CSV, out)
		}
	}
}
