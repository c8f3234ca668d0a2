// Package csvrow reads the records of a delimited text file as RFC 4180
// has them: fields separated by one delimiter byte, a field in double
// quotes holding delimiters, newlines and quotes doubled (""), spaces
// around a field ignored. Unquoted lines, the common case, are split in
// place without copying; only a line holding a quote goes through the
// quote state machine. The model language (header lines, the width check
// at load) and the data readers share it, so both split a line alike.
package csvrow
