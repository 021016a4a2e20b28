# syntax=docker/dockerfile:1
#
# The millrace image: one static binary that is both the bridge (`millrace bridge`) and the
# standard Ankka Flow sidecar (`millrace sidecar`), on distroless/static as a non-root user.
# It holds no shell and no language runtime: an action's image adds its runtime and script on
# top (deploy/README.md; deploy/examples/python/Dockerfile).
#
#   docker build --build-arg VERSION=0.1.0 -t ghcr.io/ankka-flow/millrace:0.1.0 .
#
# The build command is scripts/build, run by the RUN line below; CI runs that same RUN line
# (cmd/millrace/deploy_test.go), so the image and CI build the binary the same way.

FROM --platform=$BUILDPLATFORM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
ARG TARGETOS
ARG TARGETARCH
ARG VERSION=dev
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    GOOS=$TARGETOS GOARCH=$TARGETARCH VERSION=$VERSION scripts/build

FROM gcr.io/distroless/static-debian13:nonroot
COPY --from=build /src/millrace /usr/local/bin/millrace
# distroless's nonroot user, by number so that Kubernetes' runAsNonRoot can check it.
USER 65532:65532
# The sidecar's readiness probe runs `millrace sidecar ready-check` (exit 0 iff the readiness
# file exists): no shell is needed, and there is none.
ENTRYPOINT ["millrace"]
CMD ["help"]
