//! The manual's layout page (docs/src/layout.md) against the tree: every top-level folder, every
//! crate and every command has its place on it, so the page cannot go stale silently.

use std::path::Path;

fn root() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
}

fn page() -> String {
    std::fs::read_to_string(root().join("docs/src/layout.md")).expect("docs/src/layout.md")
}

/// Folders that are not the project's: build output and what tools leave.
const NOT_OURS: [&str; 6] = [".git", "target", "dist", "dist.tmp", "node_modules", "__pycache__"];

#[test]
fn every_top_level_folder_is_on_the_layout_page() {
    let page = page();
    let mut missing = Vec::new();
    for entry in std::fs::read_dir(root()).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name().into_string().unwrap();
        if entry.file_type().unwrap().is_dir()
            && !NOT_OURS.contains(&name.as_str())
            && !page.contains(&format!("`{name}/`"))
        {
            missing.push(name);
        }
    }
    assert!(missing.is_empty(), "docs/src/layout.md does not show the folders {missing:?} (as `name/`)");
}

/// Each `name = "…"` of a `[package]` table in the workspace's manifests (the root's, its
/// members', and fuzz/, a workspace of its own).
fn crates() -> Vec<String> {
    let manifest = std::fs::read_to_string(root().join("Cargo.toml")).unwrap();
    let members = manifest.split("members = [").nth(1).and_then(|m| m.split(']').next()).expect("workspace members");
    let mut dirs: Vec<String> = vec![".".into(), "fuzz".into()];
    dirs.extend(members.split(',').map(|m| m.trim().trim_matches('"').to_string()).filter(|m| !m.is_empty()));
    dirs.iter()
        .map(|dir| {
            let text = std::fs::read_to_string(root().join(dir).join("Cargo.toml")).unwrap();
            let package = text.split("[package]").nth(1).unwrap_or_else(|| panic!("{dir}/Cargo.toml: no [package]"));
            let name = package.lines().find_map(|l| l.trim().strip_prefix("name = ")).expect("a name");
            name.trim_matches('"').to_string()
        })
        .collect()
}

#[test]
fn every_crate_is_on_the_layout_page() {
    let page = page();
    let crates = crates();
    assert!(crates.len() >= 6, "{crates:?}");
    let missing: Vec<&String> = crates.iter().filter(|c| !page.contains(&format!("`{c}`"))).collect();
    assert!(missing.is_empty(), "docs/src/layout.md does not name the crates {missing:?}");
}

#[test]
fn every_command_is_on_the_layout_page() {
    let page = page();
    let mut missing = Vec::new();
    for entry in std::fs::read_dir(root().join("docs/src/commands")).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        let Some(command) = name.strip_suffix(".md") else { continue };
        if !page.contains(&format!("`{}`", command.to_uppercase())) {
            missing.push(command.to_uppercase());
        }
    }
    assert!(missing.is_empty(), "docs/src/layout.md's command table lacks {missing:?}");
}
