//! `.proto` files to descriptors, with protox: where files and their imports are read from, and a compile error
//! turned into `file:line: reason`.

use std::collections::BTreeMap;
use std::path::Path;

use miette::Diagnostic;
use prost_reflect::DescriptorPool;
use protox::file::{ChainFileResolver, File, FileResolver, GoogleFileResolver};

use crate::ProtoError;

/// The `google.rpc` files every set carries, so that a gRPC error's details can be written as
/// `google.rpc.RetryInfo` and friends without the googleapis files at hand.
const BUILTIN: [(&str, &str); 2] = [
    (
        "google/rpc/status.proto",
        include_str!("../google/rpc/status.proto"),
    ),
    (
        "google/rpc/error_details.proto",
        include_str!("../google/rpc/error_details.proto"),
    ),
];

/// The files `read` gives, found by name: the listed files by the name they were given, an import in the folder of
/// each listed file and the folders above it.
struct Sources<R> {
    read: R,
    /// Folder prefixes an import is looked for under, deepest first, ending with "" (where `read` starts).
    roots: Vec<String>,
    /// What each listed file's name stands for, already read.
    listed: BTreeMap<String, String>,
}

impl<R: Fn(&str) -> Result<Vec<u8>, String>> FileResolver for Sources<R> {
    fn open_file(&self, name: &str) -> Result<File, protox::Error> {
        if let Some((_, source)) = BUILTIN.iter().find(|(n, _)| *n == name) {
            return File::from_source(name, source);
        }
        if let Some(source) = self.listed.get(name) {
            return File::from_source(name, source);
        }
        for root in &self.roots {
            let path = join(root, name);
            if let Ok(bytes) = (self.read)(&path) {
                let source = String::from_utf8(bytes).map_err(|_| {
                    protox::Error::new(std::io::Error::new(
                        std::io::ErrorKind::InvalidData,
                        format!("{path}: not UTF-8 text"),
                    ))
                })?;
                return File::from_source(name, &source);
            }
        }
        Err(protox::Error::file_not_found(name))
    }
}

fn join(root: &str, name: &str) -> String {
    if root.is_empty() {
        name.to_string()
    } else {
        format!("{root}/{name}")
    }
}

/// Compiles `files`, read through `read`, into one pool with their imports and the built-in files.
pub(crate) fn compile<R>(files: &[String], read: R) -> Result<DescriptorPool, ProtoError>
where
    R: Fn(&str) -> Result<Vec<u8>, String> + 'static,
{
    let mut listed = BTreeMap::new();
    let mut names = Vec::new();
    let mut roots: Vec<String> = Vec::new();
    for file in files {
        let bytes = read(file).map_err(|why| ProtoError::Read {
            file: file.clone(),
            why,
        })?;
        let source = String::from_utf8(bytes).map_err(|_| ProtoError::Read {
            file: file.clone(),
            why: "not UTF-8 text, so not a .proto file".into(),
        })?;
        let path = Path::new(file);
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .ok_or_else(|| ProtoError::Read {
                file: file.clone(),
                why: "names no file".into(),
            })?;
        let mut folder = path.parent();
        while let Some(f) = folder {
            let root = f.to_string_lossy().into_owned();
            if !roots.contains(&root) {
                roots.push(root);
            }
            folder = f.parent();
        }
        if listed.insert(name.clone(), source).is_some() {
            return Err(ProtoError::Read {
                file: file.clone(),
                why: format!("another listed file is also called {name}"),
            });
        }
        names.push(name);
    }
    // Deepest first, so that an import is found beside its file before a folder above.
    roots.sort_by_key(|r| std::cmp::Reverse(r.matches('/').count() + usize::from(!r.is_empty())));
    let sources = Sources {
        read,
        roots,
        listed,
    };
    let mut chain = ChainFileResolver::new();
    chain.add(GoogleFileResolver::new());
    chain.add(sources);
    let mut compiler = protox::Compiler::with_file_resolver(chain);
    compiler.include_imports(true);
    for name in BUILTIN
        .iter()
        .map(|(n, _)| *n)
        .chain(names.iter().map(String::as_str))
    {
        compiler
            .open_file(name)
            .map_err(|e| compile_error(&e, name))?;
    }
    let pool = compiler.descriptor_pool();
    Ok(pool)
}

/// protox's error as `file:line: reason`, the line found from the error's label in the file's source.
fn compile_error(e: &protox::Error, opened: &str) -> ProtoError {
    let file = e.file().unwrap_or(opened).to_string();
    let line = e
        .labels()
        .and_then(|mut labels| labels.next())
        .and_then(|label| {
            let source = e.source_code()?;
            let contents = source.read_span(label.inner(), 0, 0).ok()?;
            Some(contents.line() + 1)
        });
    let at = match line {
        Some(line) => format!("{file}:{line}"),
        None => file,
    };
    let why = e
        .help()
        .map_or_else(|| e.to_string(), |help| format!("{e} ({help})"));
    ProtoError::Compile { at, why }
}
