//! Owns finding block devices and their buses (USB, SATA, MMC, NVMe, virtio) through sysfs or libudev.
