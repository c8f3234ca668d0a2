package transport

import (
	"bytes"
	"io"
)

// run reads a whole stream from rd (the tests' and the fuzzer's way in;
// a connection's frames come through the sink), in pieces of 4 KiB or
// less; io.EOF between frames is a clean end.
func (m *msgReader) run(rd io.Reader) error {
	var chunk [4 << 10]byte
	for {
		n, err := rd.Read(chunk[:])
		if n > 0 {
			if err := m.fill(bytes.NewReader(chunk[:n]), n); err != nil {
				return err
			}
		}
		if err != nil {
			return m.end(err)
		}
	}
}
