# psgraph as a static binary in a small image, for `psgraph k8s` (docs/deploy.md).
#   docker build -t psgraph:$(git describe --always) .
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X github.com/psgraph/psgraph/cmd.Version=${VERSION}" -o /out/psgraph .

# The manifests run `psgraph run` itself (command: [psgraph, run], found on
# the PATH in /usr/local/bin) as user 65534 with a read-only root; busybox
# only adds a shell for `kubectl exec` when debugging a pod.
FROM busybox:1.36
COPY --from=build /out/psgraph /usr/local/bin/psgraph
# The examples' data, at the path a plan split from the repository root
# (split examples/... -o plan/) refers to: ../examples/data from /psgraph/plan.
COPY examples /psgraph/examples
WORKDIR /psgraph
USER 65534:65534
ENTRYPOINT ["psgraph"]
