package data

import (
	"fmt"

	"github.com/psgraph/psgraph/dsl"
)

func openTFRecord(spec *dsl.Data, p *rowParser, buffer int) (rowSource, error) {
	return nil, fmt.Errorf("tfrecord: not yet")
}

func openParquet(spec *dsl.Data, p *rowParser) (rowSource, error) {
	return nil, fmt.Errorf("parquet: not yet")
}
