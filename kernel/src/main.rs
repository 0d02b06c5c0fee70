fn main() {
    eprintln!(
        "neuronlab-kernel: the Jupyter kernel is not built yet; use `neuronlab demo` for now"
    );
    std::process::exit(2);
}
