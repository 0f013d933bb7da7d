//! Owns `usbperf-matrix tree`: the USB storage tree.
use crate::exit::Exit;

#[derive(Debug, clap::Args)]
pub struct TreeArgs {}

pub fn run(_cli: &super::Cli, _args: &TreeArgs) -> anyhow::Result<Exit> {
    anyhow::bail!("tree: inventory is being wired in")
}
