// Package tfrecord reads TFRecord files of tf.Example records, as
// TensorFlow writes them: each record framed as its length (uint64,
// little-endian), the masked CRC-32C of the length, its bytes and their
// masked CRC-32C, the whole file optionally gzip-compressed; each record
// a tf.Example protocol buffer, a map from feature keys to a bytes_list,
// a float_list or an int64_list. It decodes the wire format directly,
// without generated code, copying nothing: the data reader turns the
// values into a row's fields.
package tfrecord
