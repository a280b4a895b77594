module github.com/walbroker/walbroker

go 1.26.0

require (
	github.com/HdrHistogram/hdrhistogram-go v1.4.0
	github.com/edsrzf/mmap-go v1.2.0
	github.com/klauspost/crc32 v1.3.0
	github.com/schollz/progressbar/v3 v3.15.0
	github.com/stretchr/testify v1.12.1
	golang.org/x/sys v0.50.0
)

require (
	github.com/mitchellh/colorstring v0.0.0-20190213212951-d06e56a500db // indirect
	github.com/rivo/uniseg v0.4.7 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
	golang.org/x/term v0.44.0 // indirect
)
