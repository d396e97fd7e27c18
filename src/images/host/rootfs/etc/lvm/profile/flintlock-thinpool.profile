# The thin pool grows by 20% when 80% full, into the volume group's free 4% and beyond.
activation {
	thin_pool_autoextend_threshold=80
	thin_pool_autoextend_percent=20
}
