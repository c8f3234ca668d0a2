package trainer

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/psgraph/psgraph/dsl"
	"github.com/psgraph/psgraph/exec/metrics"
	"github.com/psgraph/psgraph/exec/modelfile"
	"github.com/psgraph/psgraph/exec/program"
)

// checkDynamic refuses what a run of a model with dynamic tables cannot
// do yet: run as part of a split job.
func checkDynamic(g *dsl.Graph, opt RunOptions) error {
	dyn := g.DynamicParams()
	if len(dyn) == 0 {
		return nil
	}
	pos := g.Vars[dyn[0]].Pos
	switch {
	case opt.Comm != nil:
		return dsl.Errorf(pos, "%s is a dynamic table, which a split job does not hold yet; train the model with psgraph run --role local", dyn[0])
	}
	return nil
}

// saveTables adds each dynamic table's keys and rows to params, as a
// model file holds them (program.TableTensors), and returns names with
// the keys' tensors added.
func saveTables(p *program.Program, params program.Scope, names []string) ([]string, error) {
	for _, dt := range p.Lowered {
		keys, rows, err := program.TableTensors(p.Tables[dt.Name])
		if err != nil {
			return nil, fmt.Errorf("%s: %w", dt.Name, err)
		}
		params[dt.Name], params[program.KeysName(dt.Name)] = rows, keys
		names = append(names, program.KeysName(dt.Name))
	}
	return names, nil
}

// chains are the checkpoint chains of the program's dynamic tables.
func chains(ck *modelfile.Checkpointer, p *program.Program) []*modelfile.TableChain {
	var out []*modelfile.TableChain
	for _, dt := range p.Lowered {
		out = append(out, &modelfile.TableChain{Dir: ck.Dir, Node: ck.Node, Table: dt.Name})
	}
	return out
}

// saveChains cuts each dynamic table into its chain at step, before the
// node's checkpoint of step is listed (a crash between the two leaves a
// link the restore of an older step drops).
func saveChains(ck *modelfile.Checkpointer, p *program.Program, step int64) error {
	if len(p.Lowered) == 0 {
		return nil
	}
	if err := os.MkdirAll(ck.Dir, 0o755); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	m, _, err := ck.Manifest()
	if err != nil {
		return err
	}
	steps := append(slices.Clone(m.Steps), step)
	slices.Sort(steps)
	steps = slices.Compact(steps)
	keep := ck.Keep
	if keep <= 0 {
		keep = 2
	}
	keepFrom := steps[max(0, len(steps)-keep)]
	for _, c := range chains(ck, p) {
		if err := c.Save(step, p.Tables[c.Table], keepFrom); err != nil {
			return err
		}
	}
	return nil
}

// restoreChains restores each dynamic table to its chain's step.
func restoreChains(ck *modelfile.Checkpointer, p *program.Program, step int64) error {
	for _, c := range chains(ck, p) {
		if err := c.Restore(step, p.Tables[c.Table]); err != nil {
			return err
		}
	}
	return nil
}

// tableStats is the state of the program's dynamic tables, in declaration
// order (the Prometheus gauges and counters, the summary line).
func tableStats(p *program.Program) []metrics.TableStats {
	var out []metrics.TableStats
	for _, dt := range p.Lowered {
		st := p.Tables[dt.Name].Stats()
		out = append(out, metrics.TableStats{Table: dt.Name, Live: st.Live, Held: st.Held,
			Admitted: st.Admitted, EvictedTTL: st.EvictedTTL, EvictedCapacity: st.EvictedCapacity, Bytes: st.Bytes.Total()})
	}
	return out
}

// writeTables writes the summary's "tables" member.
func writeTables(b *strings.Builder, tables []metrics.TableStats) {
	if len(tables) == 0 {
		return
	}
	b.WriteString(`,"tables":{`)
	for i, t := range tables {
		if i > 0 {
			b.WriteByte(',')
		}
		k, _ := json.Marshal(t.Table)
		fmt.Fprintf(b, `%s:{"live_rows":%d,"held_rows":%d,"admitted":%d,"evicted_ttl":%d,"evicted_capacity":%d,"bytes":%d}`,
			k, t.Live, t.Held, t.Admitted, t.EvictedTTL, t.EvictedCapacity, t.Bytes)
	}
	b.WriteByte('}')
}
