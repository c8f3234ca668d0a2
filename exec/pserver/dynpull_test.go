package pserver

import (
	"encoding/binary"
	"strconv"
	"strings"
	"testing"

	"github.com/psgraph/psgraph/exec/dyntable"
)

// keyPull is the bytes of a pull of keys (docs/wire.md, "Pulls": the
// header with the key-list flag, then the keys).
func keyPull(final bool, keys ...int64) []byte {
	b := make([]byte, 20+8*len(keys))
	flags := uint32(1 << 4)
	if final {
		flags |= 1
	}
	binary.LittleEndian.PutUint32(b[8:], flags)
	binary.LittleEndian.PutUint32(b[16:], uint32(len(keys)))
	for i, k := range keys {
		binary.LittleEndian.PutUint64(b[20+8*i:], uint64(k))
	}
	return b
}

// A dynamic shard refuses a pull of a key another shard holds, and a
// range before the job's end, before it reads anything; it takes a list
// of its own keys at any step.
func TestDynamicPullDecode(t *testing.T) {
	s := &dynShardServer{table: "emb", shard: 0, shards: 2}
	var mine, theirs int64
	for k := int64(1); mine == 0 || theirs == 0; k++ {
		if dyntable.ShardOf(k, 2) == 0 {
			mine = k
		} else {
			theirs = k
		}
	}
	if r, err := s.decode(keyPull(false, mine, mine)); err != nil || len(r.KeyList) != 2 {
		t.Errorf("a pull of its own keys: %+v, %v", r, err)
	}
	range_ := make([]byte, 20)
	binary.LittleEndian.PutUint32(range_[8:], 1<<1) // a range, not final
	for _, c := range []struct {
		b    []byte
		want string
	}{
		{keyPull(false, mine, theirs), "key " + strconv.FormatInt(theirs, 10) + " from shard 0 of 2, but the key belongs to shard 1"},
		{range_, "a pull of a range at step 0, before the job's end"},
	} {
		if _, err := s.decode(c.b); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("got %v, want %q", err, c.want)
		}
	}
}
