//! The API only adds: every message field (number, name, type), enum value and RPC of a
//! released version is still there, unchanged. A release's surface is checked in as text
//! (`proto/releases/<version>.surface`, written by `make api-release VERSION=…`); the
//! test below fails on anything today's descriptors removed, renumbered or retyped.

use std::collections::BTreeSet;

use prost::Message;
use prost_types::{DescriptorProto, EnumDescriptorProto, FileDescriptorSet};

/// One line per field, enum value and RPC of the `chime.*` files in `set`, sorted.
pub fn surface(set: &FileDescriptorSet) -> BTreeSet<String> {
    let mut lines = BTreeSet::new();
    for file in set
        .file
        .iter()
        .filter(|f| f.package().starts_with("chime."))
    {
        let package = file.package();
        for message in &file.message_type {
            message_lines(
                &format!("{package}.{}", message.name()),
                message,
                &mut lines,
            );
        }
        for e in &file.enum_type {
            enum_lines(&format!("{package}.{}", e.name()), e, &mut lines);
        }
        for service in &file.service {
            for m in &service.method {
                lines.insert(format!(
                    "rpc {package}.{}/{} {}{} -> {}{}",
                    service.name(),
                    m.name(),
                    if m.client_streaming() { "stream " } else { "" },
                    m.input_type().trim_start_matches('.'),
                    if m.server_streaming() { "stream " } else { "" },
                    m.output_type().trim_start_matches('.'),
                ));
            }
        }
    }
    lines
}

fn message_lines(name: &str, message: &DescriptorProto, lines: &mut BTreeSet<String>) {
    for f in &message.field {
        lines.insert(format!(
            "field {name} {} {} {:?} {:?} {}",
            f.number(),
            f.name(),
            f.r#type(),
            f.label(),
            f.type_name().trim_start_matches('.'),
        ));
    }
    for nested in &message.nested_type {
        message_lines(&format!("{name}.{}", nested.name()), nested, lines);
    }
    for e in &message.enum_type {
        enum_lines(&format!("{name}.{}", e.name()), e, lines);
    }
}

fn enum_lines(name: &str, e: &EnumDescriptorProto, lines: &mut BTreeSet<String>) {
    for v in &e.value {
        lines.insert(format!("enum {name} {} {}", v.number(), v.name()));
    }
}

/// Checks that every line of every release surface in `dir` (`<version>.surface`) is in
/// `today`: the number of releases checked, or what of which release is gone or changed.
/// The REST surface of the gateway is checked with this too.
pub fn only_adds(dir: &std::path::Path, today: &BTreeSet<String>) -> Result<usize, String> {
    let entries = std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut checked = 0;
    for entry in entries.filter_map(Result::ok) {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(version) = name.strip_suffix(".surface") else {
            continue;
        };
        let text = std::fs::read_to_string(entry.path()).map_err(|e| format!("{name}: {e}"))?;
        let gone: Vec<&str> = text
            .lines()
            .filter(|l| !l.is_empty() && !today.contains(*l))
            .collect();
        if !gone.is_empty() {
            return Err(format!(
                "the API only adds, but these of release {version} are gone or changed:\n{}",
                gone.join("\n")
            ));
        }
        checked += 1;
    }
    Ok(checked)
}

/// Today's surface, from the descriptors this crate was built with.
pub fn current() -> Result<BTreeSet<String>, prost::DecodeError> {
    Ok(surface(&FileDescriptorSet::decode(
        crate::FILE_DESCRIPTOR_SET,
    )?))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::path::PathBuf;

    fn releases() -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../proto/releases")
    }

    #[test]
    fn nothing_released_is_removed_renumbered_or_retyped() {
        let today = super::current().expect("descriptors decode");
        match super::only_adds(&releases(), &today) {
            Ok(checked) => assert!(checked > 0, "no release surface in proto/releases"),
            Err(gone) => panic!("{gone}"),
        }
    }

    #[test]
    fn a_renumbered_field_is_caught() {
        let today = super::current().expect("descriptors decode");
        let field = today
            .iter()
            .find(|l| l.starts_with("field chime.v1.CreateTimerRequest "))
            .expect("a CreateTimerRequest field");
        let mut parts: Vec<String> = field.split(' ').map(str::to_owned).collect();
        parts[2] = (parts[2].parse::<u32>().unwrap() + 1000).to_string();
        assert!(!today.contains(&parts.join(" ")));
    }

    /// `make api-release VERSION=x.y.z` writes the release's surface with this.
    #[test]
    #[ignore = "writes proto/releases/$CHIME_RELEASE.surface; run by make api-release"]
    fn write_release_surface() {
        let version = std::env::var("CHIME_RELEASE").expect("CHIME_RELEASE=x.y.z");
        let today = super::current().expect("descriptors decode");
        let mut text = today.into_iter().collect::<Vec<_>>().join("\n");
        text.push('\n');
        std::fs::create_dir_all(releases()).unwrap();
        std::fs::write(releases().join(format!("{version}.surface")), text).unwrap();
    }
}
