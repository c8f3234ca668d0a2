package data

import "testing"

// seenKey.is compares a key of at most 8 bytes as a word read past its
// end: keys of every length up to 10, cut from a record that goes on
// (or ends at the key), equal or differing in their last byte, or of
// another length, compare as their strings do.
func TestSeenKeyIs(t *testing.T) {
	rec := []byte("abcdefghijklmnop")
	for n := 0; n <= 10; n++ {
		k := newSeenKey(rec[:n], 1)
		last := append([]byte{}, rec...)
		if n > 0 {
			last[n-1] = 'Z'
		}
		for _, key := range [][]byte{
			rec[:n],                      // the record goes on past it
			append([]byte{}, rec[:n]...), // a key all its own (capacity n or so)
			last[:n],                     // its last byte another
			rec[1 : n+1],                 // another key of that length
			rec[:max(0, n-1)], rec[:n+1], // other lengths
			append(append([]byte{}, rec[:n]...), 'z')[:n], // the same key, then other bytes
		} {
			if got, want := k.is(key), string(key) == string(rec[:n]); got != want {
				t.Errorf("key %q is %q: %v, want %v", rec[:n], key, got, want)
			}
		}
	}
}
