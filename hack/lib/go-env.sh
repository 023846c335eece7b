# Sourced by the hack/ scripts that fetch or build with Go from the Go module proxy: one module
# and build cache under the project's cache root, shared by all of them, so that a module
# fetched once (Kubernetes' dependencies, the CRDs' modules) is never fetched again.
#
#   go_env CACHE_ROOT
#
# -modcacherw keeps the module cache deletable with a plain rm -rf; GOWORK=off and running
# outside any module keep a go.mod or go.work around the caller out of it; GOTOOLCHAIN=local
# uses the Go on PATH rather than downloading another.
go_env() {
  local root=$1
  mkdir -p "$root/go/mod" "$root/go/build"
  export GOMODCACHE=$root/go/mod
  export GOCACHE=$root/go/build
  export GOFLAGS="-modcacherw -buildvcs=false"
  export GOWORK=off
  export GOTOOLCHAIN=${GOTOOLCHAIN:-local}
}
