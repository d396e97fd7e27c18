module batteryop.local/pause

go 1.26.0
