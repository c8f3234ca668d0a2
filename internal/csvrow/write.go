package csvrow

// AppendField appends field to b as RFC 4180 writes it with delimiter
// delim: in quotes, its quotes doubled, when it holds the delimiter, a
// quote, a newline or a carriage return, or starts or ends with a space
// (which a reader would trim); as it is otherwise.
func AppendField(b, field []byte, delim byte) []byte {
	quote := len(field) > 0 && (field[0] == ' ' || field[len(field)-1] == ' ')
	for _, c := range field {
		if c == delim || c == '"' || c == '\n' || c == '\r' {
			quote = true
			break
		}
	}
	if !quote {
		return append(b, field...)
	}
	b = append(b, '"')
	for _, c := range field {
		if c == '"' {
			b = append(b, '"')
		}
		b = append(b, c)
	}
	return append(b, '"')
}
