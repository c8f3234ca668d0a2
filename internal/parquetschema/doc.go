// Package parquetschema names the columns of a parquet file as a data
// section addresses them: each top-level field is a column, read from its
// one leaf column (a value, or a list of values). The model language
// resolves column names with it when a model is loaded (Columns), and
// the data reader finds the leaf columns to read with it (Fields, of the
// schema parquet-go decoded as it opened the file: the reader reads the
// footer once), so both agree. Columns decodes the footer's schema
// itself (thrift's compact protocol, a few fields of it), so the model
// language links no parquet reader: with
// parquet-go and its compressors, each test binary that imports dsl
// without exec/data was 5 MB larger and took 0.1-0.2 s more CPU to link
// (TestColumnsAsParquetGoReadsThem checks it against parquet-go).
package parquetschema
