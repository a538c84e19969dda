# Sourced by the GPU scripts. outdir NAME [DIR]: prints DIR as an absolute
# path, made if needed, or a new folder under $TMPDIR without DIR. A DIR
# inside the repository is refused (status 2): raw logs are not committed,
# their figures go into docs/MEASUREMENTS.md.
outdir() {
    local root d
    root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
    d=${2:-}
    if [ -z "$d" ]; then
        mktemp -d "${TMPDIR:-/tmp}/flexgv-$1.XXXXXX"
        return
    fi
    case "$(realpath -m "$d")/" in
    "$root"/*)
        echo "OUTDIR $d is inside the repository ($root): raw logs stay out of it; give a folder outside it" >&2
        return 2
        ;;
    esac
    mkdir -p "$d" && cd "$d" && pwd
}
