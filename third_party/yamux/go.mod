module github.com/hashicorp/yamux

go 1.20
