package dsl

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// StdinPath is data.csv's name for standard input (csv: "-").
const StdinPath = "-"

// Online is a data section's online source: rows that arrive while the
// model trains (docs/streaming.md). A Kafka topic, standard input, a file
// that keeps growing (follow: true) or a directory of part files read in
// name order. Its rows have the format of a csv file's and go through the
// same column specs, hashing and normalization; the run trains on each
// row once, in the order the source gives them, and its checkpoints hold
// the source's position.
type Online struct {
	Kafka *Kafka // nil: a file source (CSV names it)
	Stdin bool   // csv: "-"
	Dir   bool   // csv names a directory of part files
	// Follow: at the end of the file (or of the directory's last part)
	// wait for more rather than end.
	Follow bool
	// SkipBad: a row that does not parse is counted, logged and skipped
	// (on_bad_row: skip); false: the run stops naming it (the default).
	SkipBad bool
	// NormalizeRows > 0: normalize takes its statistics from the stream's
	// first NormalizeRows rows (unless --init-from gives them).
	NormalizeRows int
	// Window is the number of rows the progressive validation's windowed
	// loss and metrics cover (metrics_window; default DefaultWindow).
	Window int
	Pos    Pos
	// Where the keys were given, for errors found at run time.
	NormalizeRowsPos, FollowPos Pos
}

// DefaultWindow is the rows of the progressive validation's window when
// data.metrics_window is not given.
const DefaultWindow = 100000

// Kafka is a data section's kafka source: one row per message value.
type Kafka struct {
	Brokers  []string
	Topic    string
	ClientID string
	// Start is where a run without a checkpoint starts reading: "earliest",
	// "latest" (the default) or a time (StartTime, from an RFC 3339 value).
	Start     string
	StartTime time.Time
	TLS       *KafkaTLS  // nil: plaintext
	SASL      *KafkaSASL // nil: none
	// IdleAfter is how long a partition may have no message while
	// another has some before its turns of the round robin are passed
	// over (idle_after; DefaultIdleAfter unless given; 0: never, the
	// strict order whatever the partitions hold).
	IdleAfter time.Duration
	Pos       Pos
}

// DefaultIdleAfter is data.kafka.idle_after when not given.
const DefaultIdleAfter = 10 * time.Second

// KafkaTLS is the TLS of a kafka source's connections.
type KafkaTLS struct {
	CA, Cert, Key string // PEM files (resolved); CA "": the system's roots
	ServerName    string
	// InsecureSkipVerify accepts any broker certificate (tests only).
	InsecureSkipVerify bool
}

// KafkaSASL is the SASL authentication of a kafka source.
type KafkaSASL struct {
	Mechanism string // PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512
	User      string
	// PasswordEnv names the environment variable holding the password:
	// a model file is no place for a secret.
	PasswordEnv string
}

// IsOnline says whether the data arrives as training goes (an online
// source) rather than from a file read whole or in epochs.
func (d *Data) IsOnline() bool { return d != nil && d.Online != nil }

// Source describes where an online source's rows come from, for logs and
// errors: "kafka topic clicks at 127.0.0.1:9092", "standard input", the
// file or directory.
func (o *Online) Source(csv string) string {
	switch {
	case o.Kafka != nil:
		return fmt.Sprintf("kafka topic %q at %s", o.Kafka.Topic, strings.Join(o.Kafka.Brokers, ","))
	case o.Stdin:
		return "standard input"
	case o.Dir:
		return "directory " + csv
	}
	return csv
}

var (
	kafkaKeys = []string{"brokers", "topic", "client_id", "start", "tls", "sasl", "idle_after"}
	tlsKeys   = []string{"ca", "cert", "key", "server_name", "insecure_skip_verify"}
	saslKeys  = []string{"mechanism", "user", "password_env"}
)

// onlineNodes are the keys of a data section that make or shape an
// online source, for the checks after the whole section is read.
type onlineNodes struct {
	kafka, follow, onBad, normRows, window *yaml.Node
	csvDir                                 bool
	csvErr                                 error // the csv path's stat error, reported unless follow
	csvNode                                *yaml.Node
	following, skipBad                     bool
	normRowsN, windowN                     int
	kafkaSpec                              *Kafka
}

// csvSource decodes data.csv: a file, a directory of part files, or "-"
// (standard input). Whether the path must exist is decided once the whole
// section is read (follow: true waits for it).
func (d *decoder) csvSource(data *Data, at *dataNodes, dir string, v *yaml.Node) {
	at.csv = v
	s, ok := d.str(v, "data.csv")
	if !ok {
		return
	}
	if s == StdinPath {
		data.CSV = s
		return
	}
	if !filepath.IsAbs(s) {
		s = filepath.Join(dir, s)
	}
	data.CSV = s
	at.online.csvNode = v
	if st, err := os.Stat(s); err != nil {
		at.online.csvErr = err
	} else if st.IsDir() {
		at.online.csvDir = true
	}
}

// onlineField decodes the data keys of online sources.
func (d *decoder) onlineField(at *dataNodes, dir, key string, k, v *yaml.Node) {
	o := &at.online
	switch key {
	case "kafka":
		o.kafka = k
		o.kafkaSpec = d.kafka(v, dir)
	case "follow":
		o.follow = k
		o.following, _ = d.boolean(v, "data.follow")
	case "on_bad_row":
		o.onBad = k
		if s, ok := d.str(v, "data.on_bad_row"); ok {
			switch s {
			case "skip":
				o.skipBad = true
			case "stop":
			default:
				d.errorf(v, "data.on_bad_row %q is not one of stop, skip%s", s, suggest(s, []string{"stop", "skip"}))
			}
		}
	case "normalize_rows":
		o.normRows = k
		o.normRowsN = d.positive(v, "data.normalize_rows", "the first rows of the stream whose statistics normalize it")
	case "metrics_window":
		o.window = k
		o.windowN = d.positive(v, "data.metrics_window", "the last rows the windowed loss and metrics cover")
	}
}

// positive decodes a positive integer; what says what it counts.
func (d *decoder) positive(v *yaml.Node, key, what string) int {
	x, ok := d.integer(v, key)
	if ok && x <= 0 {
		d.errorf(v, "%s must be positive (%s), got %d", key, what, x)
	}
	return x
}

// checkOnline settles the data section's source once all its keys are
// read: an online one (kafka, csv: "-", a directory, follow: true) gets
// data.Online, and the keys that need one, or that one cannot have, are
// refused where they are written.
func (d *decoder) checkOnline(data *Data, at *dataNodes) {
	o := &at.online
	stdin := data.CSV == StdinPath
	online := o.kafkaSpec != nil || stdin || o.csvDir || o.following
	switch {
	case o.kafka != nil && at.csv != nil:
		d.errorf(o.kafka, "data has both csv (line %d) and kafka; keep one of them", at.csv.Line)
		return
	case o.kafka != nil && at.syn != nil:
		d.errorf(o.kafka, "data has both synthetic (line %d) and kafka; keep one of them", at.syn.Line)
		return
	case o.csvErr != nil && !o.following:
		d.errorf(o.csvNode, "data file %s cannot be read: %v", data.CSV, errText(o.csvErr))
		return
	case o.following && stdin:
		d.errorf(o.follow, "data.follow reads a file or directory as it grows; standard input (csv: \"-\") is read until it ends anyway: remove follow")
		return
	case o.following && o.kafkaSpec != nil:
		d.errorf(o.follow, "data.follow is for a csv file or directory; a kafka source always waits for more messages: remove follow")
		return
	case o.follow != nil && at.csv == nil && o.kafka == nil:
		d.errorf(o.follow, "data.follow needs csv: FILE or csv: DIR, the file or directory to follow")
		return
	}
	if !online {
		for _, k := range []struct {
			node *yaml.Node
			key  string
		}{{o.onBad, "on_bad_row"}, {o.normRows, "normalize_rows"}, {o.window, "metrics_window"}} {
			if k.node != nil {
				d.errorf(k.node, "data.%s is for an online source (kafka, csv: \"-\", a directory, or follow: true); a file read whole or in epochs stops at its first bad row and normalizes with its own statistics: remove it", k.key)
			}
		}
		return
	}
	data.Online = &Online{Kafka: o.kafkaSpec, Stdin: stdin, Dir: o.csvDir, Follow: o.following, SkipBad: o.skipBad,
		NormalizeRows: o.normRowsN, Window: o.windowN, Pos: data.Pos, NormalizeRowsPos: d.pos(o.normRows), FollowPos: d.pos(o.follow)}
	if data.Online.Window == 0 {
		data.Online.Window = DefaultWindow
	}
	what := data.Online.Source(data.CSV)
	if at.shuffle != nil && data.Shuffle {
		d.errorf(at.shuffle, "data.shuffle cannot be used with an online source (%s): its rows are trained in the order they arrive, each once; remove shuffle", what)
	}
	if at.header != nil && data.Header {
		d.errorf(at.header, "data.header cannot be used with an online source (%s): its rows carry no header line; give the columns by number", what)
	}
	if e := data.Eval; e != nil && e.Fraction > 0 {
		d.errorf(at.eval, "data.eval.fraction cannot be used with an online source (%s): a stream has no end to hold a share of; give eval: {csv: HELD_OUT_FILE}", what)
	}
	if o.normRows == nil && data.Normalize != "" && data.Normalize != "none" {
		data.Online.NormalizeRowsPos = data.NormalizePos
	}
}

// checkOnlineTrain refuses train keys an online source cannot have.
func (d *decoder) checkOnlineTrain(g *Graph) {
	if g.Data.IsOnline() && g.Train != nil && g.Train.Epochs > 0 {
		d.errs = append(d.errs, Errorf(g.Train.Pos, "train.epochs counts passes over a file, and %s is an online source without passes; give train.steps (or --steps), or neither to train until the stream ends or the run is stopped (SIGTERM)", g.Data.Online.Source(g.Data.CSV)))
	}
}

// kafka decodes data.kafka.
func (d *decoder) kafka(n *yaml.Node, dir string) *Kafka {
	k := &Kafka{Pos: d.pos(n), Start: "latest", IdleAfter: DefaultIdleAfter}
	ok := d.fields(n, "data.kafka", kafkaKeys, func(key string, kn, v *yaml.Node) {
		switch key {
		case "brokers":
			if bs, ok := d.strings(v, "data.kafka.brokers"); ok {
				for i, b := range bs {
					if !strings.Contains(b, ":") {
						d.errorf(v.Content[i], "data.kafka.brokers entry %q needs a port: HOST:PORT (Kafka's default is 9092)", b)
					}
				}
				if len(bs) == 0 {
					d.errorf(v, "data.kafka.brokers is empty; list at least one HOST:PORT")
				}
				k.Brokers = bs
			}
		case "topic":
			k.Topic, _ = d.str(v, "data.kafka.topic")
		case "client_id":
			k.ClientID, _ = d.str(v, "data.kafka.client_id")
		case "start":
			s, ok := d.str(v, "data.kafka.start")
			if !ok {
				return
			}
			switch s {
			case "earliest", "latest":
				k.Start = s
			default:
				t, err := time.Parse(time.RFC3339, s)
				if err != nil {
					d.errorf(v, "data.kafka.start %q is not earliest, latest or an RFC 3339 time (e.g. 2024-05-01T00:00:00Z)", s)
					return
				}
				k.Start, k.StartTime = s, t
			}
		case "idle_after":
			s, ok := d.str(v, "data.kafka.idle_after")
			if !ok {
				return
			}
			if s == "never" {
				k.IdleAfter = 0
				return
			}
			t, err := time.ParseDuration(s)
			if err != nil || t <= 0 {
				d.errorf(v, "data.kafka.idle_after %q is not a positive duration (10s, 2m) or never: how long a partition may have no message while others have some before its turns are passed over", s)
				return
			}
			k.IdleAfter = t
		case "tls":
			k.TLS = d.kafkaTLS(v, dir)
		case "sasl":
			k.SASL = d.kafkaSASL(v)
		}
	})
	if ok {
		if k.Brokers == nil {
			d.errorf(n, "data.kafka needs brokers: [HOST:PORT, ...]")
		}
		if k.Topic == "" {
			d.errorf(n, "data.kafka needs topic: NAME")
		}
	}
	return k
}

func (d *decoder) kafkaTLS(n *yaml.Node, dir string) *KafkaTLS {
	t := &KafkaTLS{}
	if n.Kind == yaml.ScalarNode && n.Tag == "!!bool" { // tls: true, the system's roots
		if on, _ := d.boolean(n, "data.kafka.tls"); on {
			return t
		}
		return nil
	}
	file := func(v *yaml.Node, what string) string {
		s, ok := d.str(v, what)
		if !ok {
			return ""
		}
		if !filepath.IsAbs(s) {
			s = filepath.Join(dir, s)
		}
		if _, err := os.Stat(s); err != nil {
			d.errorf(v, "%s %s cannot be read: %v", what, s, errText(err))
		}
		return s
	}
	d.fields(n, "data.kafka.tls", tlsKeys, func(key string, k, v *yaml.Node) {
		switch key {
		case "ca":
			t.CA = file(v, "data.kafka.tls.ca")
		case "cert":
			t.Cert = file(v, "data.kafka.tls.cert")
		case "key":
			t.Key = file(v, "data.kafka.tls.key")
		case "server_name":
			t.ServerName, _ = d.str(v, "data.kafka.tls.server_name")
		case "insecure_skip_verify":
			t.InsecureSkipVerify, _ = d.boolean(v, "data.kafka.tls.insecure_skip_verify")
		}
	})
	if (t.Cert == "") != (t.Key == "") {
		d.errorf(n, "data.kafka.tls needs both cert and key for a client certificate, or neither")
	}
	return t
}

func (d *decoder) kafkaSASL(n *yaml.Node) *KafkaSASL {
	s := &KafkaSASL{Mechanism: "PLAIN"}
	mechs := []string{"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"}
	ok := d.fields(n, "data.kafka.sasl", saslKeys, func(key string, k, v *yaml.Node) {
		switch key {
		case "mechanism":
			if m, ok := d.str(v, "data.kafka.sasl.mechanism"); ok {
				m = strings.ToUpper(m)
				if !contains(mechs, m) {
					d.errorf(v, "data.kafka.sasl.mechanism %q is not one of %s", m, strings.Join(mechs, ", "))
				}
				s.Mechanism = m
			}
		case "user":
			s.User, _ = d.str(v, "data.kafka.sasl.user")
		case "password_env":
			s.PasswordEnv, _ = d.str(v, "data.kafka.sasl.password_env")
		}
	})
	if ok && (s.User == "" || s.PasswordEnv == "") {
		d.errorf(n, "data.kafka.sasl needs user and password_env (the environment variable holding the password)")
	}
	return s
}

// writeOnlineSource writes an online source's csv or kafka key.
func writeOnlineSource(b *bytes.Buffer, g *Graph) {
	d := g.Data
	o := d.Online
	switch {
	case o.Kafka != nil:
		k := o.Kafka
		var bs []string
		for _, x := range k.Brokers {
			bs = append(bs, YAMLString(x))
		}
		fmt.Fprintf(b, "  kafka: {brokers: [%s], topic: %s, start: %s", strings.Join(bs, ", "), YAMLString(k.Topic), YAMLString(k.Start))
		if k.ClientID != "" {
			fmt.Fprintf(b, ", client_id: %s", YAMLString(k.ClientID))
		}
		switch {
		case k.IdleAfter == DefaultIdleAfter:
		case k.IdleAfter <= 0:
			b.WriteString(", idle_after: never")
		default:
			fmt.Fprintf(b, ", idle_after: %s", k.IdleAfter)
		}
		if t := k.TLS; t != nil {
			b.WriteString(", tls: {")
			var parts []string
			for _, f := range []struct{ key, v string }{{"ca", t.CA}, {"cert", t.Cert}, {"key", t.Key}} {
				if f.v != "" {
					parts = append(parts, fmt.Sprintf("%s: %s", f.key, YAMLString(RelPath(filepath.Dir(g.File), f.v))))
				}
			}
			if t.ServerName != "" {
				parts = append(parts, "server_name: "+YAMLString(t.ServerName))
			}
			if t.InsecureSkipVerify {
				parts = append(parts, "insecure_skip_verify: true")
			}
			b.WriteString(strings.Join(parts, ", ") + "}")
		}
		if s := k.SASL; s != nil {
			fmt.Fprintf(b, ", sasl: {mechanism: %s, user: %s, password_env: %s}", s.Mechanism, YAMLString(s.User), YAMLString(s.PasswordEnv))
		}
		b.WriteString("}\n")
	case o.Stdin:
		fmt.Fprintf(b, "  csv: %s\n", YAMLString(StdinPath))
	default:
		fmt.Fprintf(b, "  csv: %s\n", YAMLString(RelPath(filepath.Dir(g.File), d.CSV)))
	}
}

// writeOnlineKeys writes the keys shaping an online source.
func writeOnlineKeys(b *bytes.Buffer, o *Online) {
	if o.Follow {
		b.WriteString("  follow: true\n")
	}
	if o.SkipBad {
		b.WriteString("  on_bad_row: skip\n")
	}
	if o.NormalizeRows > 0 {
		fmt.Fprintf(b, "  normalize_rows: %d\n", o.NormalizeRows)
	}
	if o.Window != DefaultWindow {
		fmt.Fprintf(b, "  metrics_window: %d\n", o.Window)
	}
}
