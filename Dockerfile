# configstamp: webhook and reconciler in one static binary.
#
#   make docker-build IMG=registry.example/configstamp:v0.1.0
#
# config/manager/kustomization.yaml deploys the image
# ghcr.io/configstamp/configstamp at the tag it names (newTag, this tree's
# release), which is also IMG's default in the Makefile;
# `make build-installer IMG=...` and `make deploy IMG=...` set another.

FROM golang:1.26 AS builder
ARG TARGETOS
ARG TARGETARCH
# Set by `make docker-build` (git describe, git rev-parse HEAD): the build
# context has no .git, so Go cannot embed the VCS revision itself.
ARG VERSION=""
ARG REVISION=""
WORKDIR /workspace

# Modules first, in their own layer: it is rebuilt only when go.mod or go.sum
# change, not on every source edit.
COPY go.mod go.sum ./
RUN go mod download

# Only the packages the binary is built from (test/manifests checks that this
# list covers every package ./cmd imports from this module).
COPY cmd/ cmd/
COPY certs/ certs/
COPY controllers/ controllers/
COPY webhook/ webhook/

# Static binary for distroless/static (no libc). TARGETOS/TARGETARCH come from
# `docker buildx build --platform`; without them Go builds for the builder.
RUN CGO_ENABLED=0 GOOS=${TARGETOS:-linux} GOARCH=${TARGETARCH} \
    go build -trimpath \
      -ldflags "-X main.version=${VERSION} -X main.revision=${REVISION}" \
      -o configstamp ./cmd

# Distroless static, nonroot variant: no shell, no package manager, uid 65532.
FROM gcr.io/distroless/static:nonroot
WORKDIR /
COPY --from=builder /workspace/configstamp /configstamp
# Numeric, so that the kubelet can verify runAsNonRoot.
USER 65532:65532
ENTRYPOINT ["/configstamp"]
