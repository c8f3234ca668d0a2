// An independent Parquet writer for psgraph's tests: DuckDB (npm's
// @duckdb/node-api), not psgraph's code, writes the rows of a SQL query.
//
//   node write_parquet.mjs OUT.parquet ROW_GROUP_SIZE 'SELECT ...'
//
// PSGRAPH_DUCKDB_NODE names the directory the package is installed in
// (its node_modules' parent); .ci/run installs it there.
import { createRequire } from 'node:module';

const [out, rowGroup, query] = process.argv.slice(2);
const require = createRequire(process.env.PSGRAPH_DUCKDB_NODE + '/');
const { DuckDBInstance } = require('@duckdb/node-api');
const instance = await DuckDBInstance.create(':memory:');
const con = await instance.connect();
await con.run(`COPY (${query}) TO '${out.replaceAll("'", "''")}' (FORMAT parquet, ROW_GROUP_SIZE ${Number(rowGroup)})`);
