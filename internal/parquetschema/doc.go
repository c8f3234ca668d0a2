// Package parquetschema names the columns of a parquet file as a data
// section addresses them: each top-level field is a column, read from its
// one leaf column (a value, or a list of values). The model language
// resolves column names with it when a model is loaded, and the data
// reader finds the leaf columns to read with it, so both agree.
package parquetschema
