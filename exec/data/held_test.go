package data

// What each row source holds (its buffers and scratch), for the tests
// that check a stream's memory stays bounded whatever the file's size.

// heldBy is the bytes src holds.
func heldBy(src rowSource) int64 {
	return src.(interface{ held() int64 }).held()
}

func (s *csvSource) held() int64 { return int64(s.r.Held() + cap(s.p.sp.Fields)*24) }

func (s *tfrecordSource) held() int64 {
	return int64(s.br.Size() + s.r.Held() + cap(s.row_.arena) + 24*cap(s.row_.values) + 40*cap(s.vals))
}

func (s *parquetSource) held() int64 {
	var n int64
	for _, c := range s.cur {
		n += int64(24 * cap(c.buf))
		if c.page != nil {
			n += c.page.Size()
		}
		n += int64(8 * cap(c.hashes))
		if c.ch != nil {
			n += flatChunkRows * (1 + 8 + 24)
		}
	}
	return n + int64(cap(s.b.arena)+24*cap(s.b.values))
}
