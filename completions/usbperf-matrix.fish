# Print an optspec for argparse to handle cmd's options that are independent of any subcommand.
function __fish_usbperf_matrix_global_optspecs
	string join \n h/help V/version
end

function __fish_usbperf_matrix_needs_command
	# Figure out if the current invocation already has a command.
	set -l cmd (commandline -opc)
	set -e cmd[1]
	argparse -s (__fish_usbperf_matrix_global_optspecs) -- $cmd 2>/dev/null
	or return
	if set -q argv[1]
		# Also print the command, so this can be used to figure out what it is.
		echo $argv[1]
		return 1
	end
	return 0
end

function __fish_usbperf_matrix_using_subcommand
	set -l cmd (__fish_usbperf_matrix_needs_command)
	test -z "$cmd"
	and return 1
	contains -- $cmd[1] $argv
end

complete -c usbperf-matrix -n "__fish_usbperf_matrix_needs_command" -s h -l help -d 'Print help'
complete -c usbperf-matrix -n "__fish_usbperf_matrix_needs_command" -s V -l version -d 'Print version'
complete -c usbperf-matrix -n "__fish_usbperf_matrix_needs_command" -f -a "list" -d 'List block devices with bus, class, identity, size and USB/SATA/MMC link data'
complete -c usbperf-matrix -n "__fish_usbperf_matrix_needs_command" -f -a "run" -d 'The factory run: test every configured device, judge it, write the YAML report'
complete -c usbperf-matrix -n "__fish_usbperf_matrix_needs_command" -f -a "tree" -d 'Show USB storage as a tree from each root hub (like `lsusb -t`), with speeds and drivers'
complete -c usbperf-matrix -n "__fish_usbperf_matrix_needs_command" -f -a "bench" -d 'Run one storage test (fio-like): a workload on a file or block device'
complete -c usbperf-matrix -n "__fish_usbperf_matrix_needs_command" -f -a "fleet" -d 'Aggregate many factory reports: distributions, outliers, failures, trends, learned thresholds, or an HTML page of charts'
complete -c usbperf-matrix -n "__fish_usbperf_matrix_needs_command" -f -a "show" -d 'Show reports as one table: a row per device, a column per test (MiB/s, IOPS, p99 latency, bad blocks), the verdict; as text, Markdown or CSV'
complete -c usbperf-matrix -n "__fish_usbperf_matrix_needs_command" -f -a "calibrate" -d 'On a golden unit: run the profile serial and auto in alternation, find the lanes whose figures move beside each other, and print the `schedule:`/`shared_lanes:` snippet for the board\'s profile with the speed-up measured'
complete -c usbperf-matrix -n "__fish_usbperf_matrix_needs_command" -f -a "power-cut" -d 'A power-cut test: `write` the region recording what the medium acknowledged, cut the power, and `verify` on the next boot that every acknowledged block survived'
complete -c usbperf-matrix -n "__fish_usbperf_matrix_needs_command" -f -a "flash" -d 'Raw flash (MTD NAND/NOR, UBI): health counters against the profile, a read scan counting bitflips per erase block, and the speed test of the profile\'s test area'
complete -c usbperf-matrix -n "__fish_usbperf_matrix_needs_command" -f -a "upload" -d 'Send reports to a collector: queue REPORT files in the spool, then deliver the spool with retries; a report leaves the spool only when the collector acknowledged it'
complete -c usbperf-matrix -n "__fish_usbperf_matrix_needs_command" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand list" -l sysfs-root -d 'Read devices from this sysfs tree instead of /sys (a copied or recorded tree; the directory that holds `block/`, `class/` and `devices/`, or its parent holding `sys/`)' -r -F
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand list" -l backend -d 'How to enumerate block devices: `udev` (libudev), `sysfs` (pure sysfs walk) or `auto` (libudev when it is built in and usable, sysfs otherwise; always sysfs with --sysfs-root)' -r -f -a "auto\t''
udev\t''
sysfs\t''"
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand list" -l format -d 'Output format' -r -f -a "table\t'Aligned columns for a console'
yaml\t'The same figures as YAML, for programs'
json\t'The same figures as JSON, for programs'"
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand list" -l expect -d 'Check that the USB device on PORT linked at least at SPEED Mbit/s, e.g. `usb:1-1=480` (repeatable). A shortfall makes the exit code 1' -r
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand list" -l config -d 'The configuration whose run the RUN column shows (default: /etc/usbperf/usbperf.yaml when it exists, else the built-in `quick` profile, as `run` does)' -r -F
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand list" -l all -d 'Also list disks of size 0 (detached loop devices, empty card readers)'
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand list" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand list" -s V -l version -d 'Print version'
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand run" -l backend -d 'How to enumerate block devices: `udev` (libudev), `sysfs` (pure sysfs walk) or `auto` (libudev when it is built in and usable, sysfs otherwise; always sysfs with --sysfs-root)' -r -f -a "auto\t''
udev\t''
sysfs\t''"
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand run" -l config -d 'Configuration file (default: /etc/usbperf/usbperf.yaml if it exists, else the built-in `quick` profile on every non-system device)' -r -F
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand run" -l profile -d 'Base profile, replacing the config file\'s `profile:` (the file\'s own keys still apply on top): `quick`, `full`, a board profile name (searched in the config\'s directory, /etc/usbperf/profiles, /usr/share/usbperf/profiles and ./profiles/boards) or a path' -r
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand run" -l report-dir -d 'Directory for the report (default /var/lib/usbperf/reports)' -r -F
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand run" -l format -d 'Report format' -r -f -a "yaml\t''
json\t''"
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand run" -l engine -d 'I/O engine (default: the config\'s `engine:`, else auto)' -r -f -a "auto\t'io_uring when the kernel allows it, the sync thread pool otherwise'
uring\t'io_uring: one ring per job, the queue kept full (refused where the kernel disables it)'
sync\t'A pread/pwrite thread pool, one thread per I/O in flight: runs on every kernel'
null\t'No I/O at all: measures the tool\'s own cost, never a device'"
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand run" -l wait-devices -d 'Wait up to this long for the devices the configuration marks `required` (e.g. 30s)' -r
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand run" -l headroom-percent -d 'Free space to keep on a filesystem under test, in % of its size' -r
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand run" -l lock-file -d 'Lock file that keeps runs from overlapping' -r -F
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand run" -l junit -d 'Also write the results as JUnit XML to FILE at the end of the run (also when it was interrupted): a suite per device, a case per test and per device check' -r -F
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand run" -l schedule -d 'serial: one device after another; auto: devices on independent buses (USB root hubs, MMC hosts, ATA ports, NVMe, SCSI hosts) at the same time, CPU-bound tests alone' -r -f -a "serial\t'One device after another, one cell at a time'
auto\t'Lanes at the same time; CPU-bound cells alone'"
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand run" -l dry-run -d 'Print the resolved configuration, the chosen devices and their placement; run nothing'
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand run" -l lava -d 'Print a LAVA test signal per test, per device verdict and for the unit at the end'
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand run" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand run" -s V -l version -d 'Print version'
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand tree" -l sysfs-root -d 'Read devices from this sysfs tree instead of /sys (a copied or recorded tree; the directory that holds `block/`, `class/` and `devices/`, or its parent holding `sys/`)' -r -F
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand tree" -l backend -d 'How to enumerate block devices: `udev` (libudev), `sysfs` (pure sysfs walk) or `auto` (libudev when it is built in and usable, sysfs otherwise; always sysfs with --sysfs-root)' -r -f -a "auto\t''
udev\t''
sysfs\t''"
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand tree" -l format -d 'Output format' -r -f -a "table\t'Aligned columns for a console'
yaml\t'The same figures as YAML, for programs'
json\t'The same figures as JSON, for programs'"
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand tree" -l expect -d 'Check that the USB device on PORT linked at least at SPEED Mbit/s, e.g. `usb:1-1=480` (repeatable). A shortfall makes the exit code 1' -r
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand tree" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand tree" -s V -l version -d 'Print version'
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand bench" -l target -d 'The file or block device to test; a file that does not exist is created at --size and deleted afterwards (unless --keep)' -r -F
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand bench" -l workload -r -f -a "read-buffered\t'hdparm -t: sequential large reads (O_DIRECT) for a few seconds; read-only'
seq-write\t'dd of=: sequential 1 MiB writes'
seq-read\t'dd if=: sequential 1 MiB reads after a cache drop, or O_DIRECT'
rand-read\t'Random 4 KiB reads, QD16 x 4 jobs'
rand-write\t'Random 4 KiB writes, QD16 x 4 jobs'
mixed\t'Random reads and writes, 70 % reads'
write-curve\t'A long sequential write sampled over time, with knee detection'
verify\t'Write a checkable pattern and read it back'"
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand bench" -l bs -d 'Block size (units: 512, 4k, 1M)' -r
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand bench" -l qd -d 'I/Os in flight per job (1 to 4096)' -r
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand bench" -l jobs -d 'Parallel jobs (threads, one ring each; 1 to 1024)' -r
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand bench" -l runtime -d 'Time bound (500ms, 5s, 2m); 0 for none' -r
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand bench" -l size -d 'The region to test, and the size of a created file (units: 256M, 1G)' -r
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand bench" -l engine -d 'How the I/O is issued' -r -f -a "auto\t'io_uring when the kernel allows it, the sync thread pool otherwise'
uring\t'io_uring: one ring per job, the queue kept full (refused where the kernel disables it)'
sync\t'A pread/pwrite thread pool, one thread per I/O in flight: runs on every kernel'
null\t'No I/O at all: measures the tool\'s own cost, never a device'"
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand bench" -l format -d 'How the result is printed' -r -f -a "table\t'Aligned columns for a console'
yaml\t'The same figures as YAML, for programs'
json\t'The same figures as JSON, for programs'"
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand bench" -l cache -d 'direct (O_DIRECT), fdatasync (buffered + final flush, timed), dsync (O_DSYNC), buffered' -r -f -a "direct\t'O_DIRECT (dd oflag=direct / iflag=direct)'
fdatasync\t'Buffered writes, then fdatasync, counted in the time (dd conv=fdatasync)'
dsync\t'O_DSYNC: every write waits for the medium (dd oflag=dsync)'
buffered\t'Page cache; reads start after a cache drop'"
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand bench" -l read-percent -d 'Share of reads for `mixed`, in %' -r
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand bench" -l precision -d 'Stop before --runtime once the rate is steady and half its 95 % confidence interval is at most PERCENT of it (e.g. 2): the figure is known, as the factory run\'s cells do' -r
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand bench" -l seed -d 'Seed of the random offsets and of the verify pattern' -r
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand bench" -l interval -d 'Sampling interval of `write-curve`' -r
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand bench" -l verify-mode -d 'How much of the region `verify` checks (default full)' -r -f -a "full\t'Write and read back every block of the region'
quick\t'Write and read back --verify-points blocks spread over the region'"
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand bench" -l verify-phase -d 'Run only the write or the read pass of `verify` (write, replug, read)' -r -f -a "both\t'Write the pattern, then read it back'
write\t'Only write the pattern (then replug, and run again with `read`)'
read\t'Only read back a pattern written before with the same --seed'"
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand bench" -l verify-points -d 'Probes of a quick `verify`' -r
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand bench" -l time-based -d 'Keep going over the region until --runtime (fio\'s time_based)'
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand bench" -l keep -d 'Keep a test file we created'
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand bench" -l allow-write-device -d 'Allow writing to a block device (destroys its data)'
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand bench" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand bench" -s V -l version -d 'Print version'
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand fleet" -l group-by -d 'Group devices by these, comma-separated: board, device-class, port, device-model, tool-version' -r
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand fleet" -l format -r -f -a "table\t''
csv\t''
yaml\t''
json\t''
html\t''"
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand fleet" -l out -d 'Write the output here instead of standard output' -r -F
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand fleet" -l since -d 'Only reports started on or after DATE (YYYY-MM-DD, UTC, or an RFC 3339 time)' -r
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand fleet" -l board -d 'Only reports of this board (the unit\'s device-tree / DMI model, as the table shows it)' -r
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand fleet" -l margin-percent -d 'Margin of learned limits below the fleet\'s 1st percentile (above its p99 latency)' -r
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand fleet" -l threads -d 'Parser threads (0 = one per CPU)' -r
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand fleet" -l suggest-thresholds -d 'Print a board-profile `thresholds:` list learned from the devices that passed, per device class (and per port with --group-by port), instead of the summary'
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand fleet" -l compare-builds -d 'Compare each image build (the units\' os-release) with the one before it, per board, device class and figure, and name the regressions'
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand fleet" -l wear -d 'Follow each flash part (eMMC/SD by CID, NVMe and SATA by serial) across the reports, factory and field: its day-0 wear, its rate per month, when it reaches its limit, and the parts wearing faster than their board\'s others'
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand fleet" -s h -l help -d 'Print help'
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand fleet" -s V -l version -d 'Print version'
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand show" -l format -d 'Output format: aligned `text` for a console, a `markdown` pipe table for a wiki or a ticket, or `csv` (one header row, plain numbers) for a spreadsheet' -r -f -a "text\t'Aligned columns with a two-line header (test, unit) for a console'
markdown\t'A GitHub pipe table, for a wiki page or a ticket'
csv\t'RFC 4180 quoting, one header row, LF line ends; figures are plain numbers'"
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand show" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand show" -s V -l version -d 'Print version'
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand calibrate" -l backend -d 'How to enumerate block devices: `udev` (libudev), `sysfs` (pure sysfs walk) or `auto` (libudev when it is built in and usable, sysfs otherwise; always sysfs with --sysfs-root)' -r -f -a "auto\t''
udev\t''
sysfs\t''"
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand calibrate" -l config -d 'Configuration file (as for `run`)' -r -F
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand calibrate" -l profile -d 'Base profile (as for `run`)' -r
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand calibrate" -l report-dir -d 'Directory for the calibration\'s reports (default: the config\'s report directory\'s `calibrate/`, apart from the unit\'s factory record)' -r -F
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand calibrate" -l rounds -d 'Runs of each mode per phase, at least (more, up to 6, while a figure shows neither a hold nor a move)' -r
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand calibrate" -l study -d 'Instead of the schedule: the repeatability study, the profile run N times serial' -r
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand calibrate" -l out -d 'Also write the snippet to FILE (created; an existing file is not replaced)' -r -F
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand calibrate" -l engine -d 'I/O engine (as for `run`)' -r -f -a "auto\t'io_uring when the kernel allows it, the sync thread pool otherwise'
uring\t'io_uring: one ring per job, the queue kept full (refused where the kernel disables it)'
sync\t'A pread/pwrite thread pool, one thread per I/O in flight: runs on every kernel'
null\t'No I/O at all: measures the tool\'s own cost, never a device'"
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand calibrate" -l lock-file -d 'Lock file that keeps runs from overlapping' -r -F
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand calibrate" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand calibrate" -s V -l version -d 'Print version'
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand power-cut; and not __fish_seen_subcommand_from write verify help" -s h -l help -d 'Print help'
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand power-cut; and not __fish_seen_subcommand_from write verify help" -s V -l version -d 'Print version'
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand power-cut; and not __fish_seen_subcommand_from write verify help" -f -a "write" -d 'Write the region block after block, recording what the medium acknowledged'
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand power-cut; and not __fish_seen_subcommand_from write verify help" -f -a "verify" -d 'Read the region back and judge the acknowledged blocks'
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand power-cut; and not __fish_seen_subcommand_from write verify help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand power-cut; and __fish_seen_subcommand_from write" -l target -d 'The file (created at --size, kept for the verify) or block device to write' -r -F
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand power-cut; and __fish_seen_subcommand_from write" -l state -d 'The state file; it must not exist (an earlier test waiting for its verify)' -r -F
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand power-cut; and __fish_seen_subcommand_from write" -l size -d 'The region (units: 64M, 1G); a device\'s whole size when not given' -r
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand power-cut; and __fish_seen_subcommand_from write" -l bs -d 'Block size: a multiple of 512 up to 1M' -r
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand power-cut; and __fish_seen_subcommand_from write" -l flush-every -d 'Blocks written between two acknowledgements (fdatasync and state update)' -r
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand power-cut; and __fish_seen_subcommand_from write" -l dsync -d 'Open with O_DSYNC (each write returns when the medium has it) instead of fdatasync'
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand power-cut; and __fish_seen_subcommand_from write" -l allow-write-device -d 'Allow writing to a block device (destroys its data)'
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand power-cut; and __fish_seen_subcommand_from write" -s h -l help -d 'Print help'
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand power-cut; and __fish_seen_subcommand_from write" -s V -l version -d 'Print version'
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand power-cut; and __fish_seen_subcommand_from verify" -l state -d 'The state file the write phase left' -r -F
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand power-cut; and __fish_seen_subcommand_from verify" -l target -d 'Read the region from this path instead of the state\'s (a disk that came back under another name)' -r -F
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand power-cut; and __fish_seen_subcommand_from verify" -l format -r -f -a "text\t'A few lines for people'
json\t'The verdict as one JSON object'"
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand power-cut; and __fish_seen_subcommand_from verify" -l out -d 'Also write the verdict as JSON to this new file (never replaces one)' -r -F
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand power-cut; and __fish_seen_subcommand_from verify" -l report-dir -d 'Also write the verdict as a usbperf report (JSON: the unit, the disk that holds the region, the verdict) into this directory, for `upload` and `fleet`' -r -F
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand power-cut; and __fish_seen_subcommand_from verify" -l keep -d 'Keep the state file and the test file after the verdict'
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand power-cut; and __fish_seen_subcommand_from verify" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand power-cut; and __fish_seen_subcommand_from verify" -s V -l version -d 'Print version'
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand power-cut; and __fish_seen_subcommand_from help" -f -a "write" -d 'Write the region block after block, recording what the medium acknowledged'
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand power-cut; and __fish_seen_subcommand_from help" -f -a "verify" -d 'Read the region back and judge the acknowledged blocks'
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand power-cut; and __fish_seen_subcommand_from help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand flash; and not __fish_seen_subcommand_from health scan speed help" -s h -l help -d 'Print help'
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand flash; and not __fish_seen_subcommand_from health scan speed help" -s V -l version -d 'Print version'
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand flash; and not __fish_seen_subcommand_from health scan speed help" -f -a "health" -d 'Every MTD and UBI device\'s health counters against the profile\'s limits'
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand flash; and not __fish_seen_subcommand_from health scan speed help" -f -a "scan" -d 'Read a whole MTD device, counting corrected bitflips and uncorrectable pages per erase block (read-only, safe on any partition)'
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand flash; and not __fish_seen_subcommand_from health scan speed help" -f -a "speed" -d 'Erase, write, read back and verify the profile\'s test area, timing each'
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand flash; and not __fish_seen_subcommand_from health scan speed help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand flash; and __fish_seen_subcommand_from health" -l sysfs-root -d 'Read devices from this sysfs tree instead of /sys (a copied or recorded tree; the directory that holds `block/`, `class/` and `devices/`, or its parent holding `sys/`)' -r -F
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand flash; and __fish_seen_subcommand_from health" -l backend -d 'How to enumerate block devices: `udev` (libudev), `sysfs` (pure sysfs walk) or `auto` (libudev when it is built in and usable, sysfs otherwise; always sysfs with --sysfs-root)' -r -f -a "auto\t''
udev\t''
sysfs\t''"
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand flash; and __fish_seen_subcommand_from health" -l config -d 'The configuration whose `flash:` section sets test areas and limits (default: /etc/usbperf/usbperf.yaml when it exists)' -r -F
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand flash; and __fish_seen_subcommand_from health" -l format -r -f -a "table\t'Aligned columns for a console'
yaml\t'The same figures as YAML, for programs'
json\t'The same figures as JSON, for programs'"
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand flash; and __fish_seen_subcommand_from health" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand flash; and __fish_seen_subcommand_from health" -s V -l version -d 'Print version'
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand flash; and __fish_seen_subcommand_from scan" -l sysfs-root -d 'Read devices from this sysfs tree instead of /sys (a copied or recorded tree; the directory that holds `block/`, `class/` and `devices/`, or its parent holding `sys/`)' -r -F
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand flash; and __fish_seen_subcommand_from scan" -l backend -d 'How to enumerate block devices: `udev` (libudev), `sysfs` (pure sysfs walk) or `auto` (libudev when it is built in and usable, sysfs otherwise; always sysfs with --sysfs-root)' -r -f -a "auto\t''
udev\t''
sysfs\t''"
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand flash; and __fish_seen_subcommand_from scan" -l config -d 'The configuration whose `flash:` section sets test areas and limits (default: /etc/usbperf/usbperf.yaml when it exists)' -r -F
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand flash; and __fish_seen_subcommand_from scan" -l format -r -f -a "table\t'Aligned columns for a console'
yaml\t'The same figures as YAML, for programs'
json\t'The same figures as JSON, for programs'"
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand flash; and __fish_seen_subcommand_from scan" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand flash; and __fish_seen_subcommand_from scan" -s V -l version -d 'Print version'
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand flash; and __fish_seen_subcommand_from speed" -l sysfs-root -d 'Read devices from this sysfs tree instead of /sys (a copied or recorded tree; the directory that holds `block/`, `class/` and `devices/`, or its parent holding `sys/`)' -r -F
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand flash; and __fish_seen_subcommand_from speed" -l backend -d 'How to enumerate block devices: `udev` (libudev), `sysfs` (pure sysfs walk) or `auto` (libudev when it is built in and usable, sysfs otherwise; always sysfs with --sysfs-root)' -r -f -a "auto\t''
udev\t''
sysfs\t''"
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand flash; and __fish_seen_subcommand_from speed" -l config -d 'The configuration whose `flash:` section sets test areas and limits (default: /etc/usbperf/usbperf.yaml when it exists)' -r -F
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand flash; and __fish_seen_subcommand_from speed" -l format -r -f -a "table\t'Aligned columns for a console'
yaml\t'The same figures as YAML, for programs'
json\t'The same figures as JSON, for programs'"
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand flash; and __fish_seen_subcommand_from speed" -l blocks -d 'Test at most this many good erase blocks (default: the profile\'s `test_blocks`, else the whole area)' -r
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand flash; and __fish_seen_subcommand_from speed" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand flash; and __fish_seen_subcommand_from speed" -s V -l version -d 'Print version'
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand flash; and __fish_seen_subcommand_from help" -f -a "health" -d 'Every MTD and UBI device\'s health counters against the profile\'s limits'
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand flash; and __fish_seen_subcommand_from help" -f -a "scan" -d 'Read a whole MTD device, counting corrected bitflips and uncorrectable pages per erase block (read-only, safe on any partition)'
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand flash; and __fish_seen_subcommand_from help" -f -a "speed" -d 'Erase, write, read back and verify the profile\'s test area, timing each'
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand flash; and __fish_seen_subcommand_from help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand upload" -l url -d 'The collector\'s endpoint (e.g. http://collector:8080/api/v1/reports); default: the `upload:` section of the config' -r
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand upload" -l token-file -d 'File holding the token (the first line that is not blank or a # comment)' -r -F
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand upload" -l spool -d 'The outbox to drain (default: the config\'s `upload.spool`, else /var/lib/usbperf/outbox)' -r -F
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand upload" -l config -d 'Read the `upload:` section from this config (default /etc/usbperf/usbperf.yaml when it exists); flags override it' -r -F
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand upload" -l timeout -d 'Bound on each request (connect, send, answer)' -r
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand upload" -l attempts -d 'Attempts per report while the collector cannot be reached, with backoff in between' -r
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand upload" -l ca-file -d 'The factory CA\'s certificate (PEM) the https:// collector\'s certificate must chain to (default: the config\'s `upload.ca_file`, else the public roots of a build with `upload-tls`)' -r -F
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand upload" -l allow-readable-token -d 'Use a token file that other users may read (refused by default)'
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand upload" -l print-key -d 'Print this unit\'s line for the collector\'s list of unit keys (`KEY UNIT`: the public half of the key its reports are signed with, made on first use, and the unit\'s name) and exit; nothing is sent'
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand upload" -l if-configured -d 'Exit 0 quietly when no collector is configured (the boot service\'s drain, on images that do not upload)'
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand upload" -s h -l help -d 'Print help'
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand upload" -s V -l version -d 'Print version'
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand help; and not __fish_seen_subcommand_from list run tree bench fleet show calibrate power-cut flash upload help" -f -a "list" -d 'List block devices with bus, class, identity, size and USB/SATA/MMC link data'
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand help; and not __fish_seen_subcommand_from list run tree bench fleet show calibrate power-cut flash upload help" -f -a "run" -d 'The factory run: test every configured device, judge it, write the YAML report'
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand help; and not __fish_seen_subcommand_from list run tree bench fleet show calibrate power-cut flash upload help" -f -a "tree" -d 'Show USB storage as a tree from each root hub (like `lsusb -t`), with speeds and drivers'
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand help; and not __fish_seen_subcommand_from list run tree bench fleet show calibrate power-cut flash upload help" -f -a "bench" -d 'Run one storage test (fio-like): a workload on a file or block device'
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand help; and not __fish_seen_subcommand_from list run tree bench fleet show calibrate power-cut flash upload help" -f -a "fleet" -d 'Aggregate many factory reports: distributions, outliers, failures, trends, learned thresholds, or an HTML page of charts'
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand help; and not __fish_seen_subcommand_from list run tree bench fleet show calibrate power-cut flash upload help" -f -a "show" -d 'Show reports as one table: a row per device, a column per test (MiB/s, IOPS, p99 latency, bad blocks), the verdict; as text, Markdown or CSV'
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand help; and not __fish_seen_subcommand_from list run tree bench fleet show calibrate power-cut flash upload help" -f -a "calibrate" -d 'On a golden unit: run the profile serial and auto in alternation, find the lanes whose figures move beside each other, and print the `schedule:`/`shared_lanes:` snippet for the board\'s profile with the speed-up measured'
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand help; and not __fish_seen_subcommand_from list run tree bench fleet show calibrate power-cut flash upload help" -f -a "power-cut" -d 'A power-cut test: `write` the region recording what the medium acknowledged, cut the power, and `verify` on the next boot that every acknowledged block survived'
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand help; and not __fish_seen_subcommand_from list run tree bench fleet show calibrate power-cut flash upload help" -f -a "flash" -d 'Raw flash (MTD NAND/NOR, UBI): health counters against the profile, a read scan counting bitflips per erase block, and the speed test of the profile\'s test area'
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand help; and not __fish_seen_subcommand_from list run tree bench fleet show calibrate power-cut flash upload help" -f -a "upload" -d 'Send reports to a collector: queue REPORT files in the spool, then deliver the spool with retries; a report leaves the spool only when the collector acknowledged it'
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand help; and not __fish_seen_subcommand_from list run tree bench fleet show calibrate power-cut flash upload help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand help; and __fish_seen_subcommand_from power-cut" -f -a "write" -d 'Write the region block after block, recording what the medium acknowledged'
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand help; and __fish_seen_subcommand_from power-cut" -f -a "verify" -d 'Read the region back and judge the acknowledged blocks'
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand help; and __fish_seen_subcommand_from flash" -f -a "health" -d 'Every MTD and UBI device\'s health counters against the profile\'s limits'
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand help; and __fish_seen_subcommand_from flash" -f -a "scan" -d 'Read a whole MTD device, counting corrected bitflips and uncorrectable pages per erase block (read-only, safe on any partition)'
complete -c usbperf-matrix -n "__fish_usbperf_matrix_using_subcommand help; and __fish_seen_subcommand_from flash" -f -a "speed" -d 'Erase, write, read back and verify the profile\'s test area, timing each'
